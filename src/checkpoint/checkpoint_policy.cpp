#include "frugal/checkpoint/checkpoint_policy.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "base/durable_io.hpp"
#include "frugal/base/preemption.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/base/communicator.hpp"
#include "frugal/distributed/optimizer_shards.hpp"
#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;

constexpr const char* kPreemptedMarker = "PREEMPTED";

void CheckpointOptions::validate() const {
  if (every_n_steps() < 0) throw OptionError("every_n_steps", c10::str("every_n_steps must be >= 0, got ", every_n_steps()));
  if (every_n_minutes() < 0) {
    throw OptionError("every_n_minutes", c10::str("every_n_minutes must be >= 0, got ", every_n_minutes()));
  }
  if (keep_last() < 0) throw OptionError("keep_last", c10::str("keep_last must be >= 0, got ", keep_last()));
  if (keep_best() < 0) throw OptionError("keep_best", c10::str("keep_best must be >= 0, got ", keep_best()));
  if (monitor_mode() != "min" && monitor_mode() != "max") {
    throw OptionError("monitor_mode", "monitor_mode must be min or max, got '" + monitor_mode() + "'");
  }
  if (archive_after_days() < 0) {
    throw OptionError("archive_after_days", c10::str("archive_after_days must be >= 0, got ", archive_after_days()));
  }
}

CheckpointPolicy::CheckpointPolicy(CheckpointOptions options, std::string config_toml)
    : options_(std::move(options)), config_toml_(std::move(config_toml)), store_(options_.dir()) {
  options_.validate();
}

CheckpointPolicy::~CheckpointPolicy() {
  // A fit that threw leaves a write in flight: let it finish, so the directory stays consistent.
  // (An unpublished sharded write stays a .tmp folder, removed at the next start.)
  if (shard_write_ && shard_write_->files.valid()) shard_write_->files.wait();
  if (pending_.valid()) {
    try {
      pending_.get();
    } catch (const std::exception& e) {
      log::error(e.what());
    }
  }
}

namespace {
// The largest of each value across ranks: one collective, on the training device (NCCL reduces
// only CUDA tensors).
std::vector<int64_t> max_across_ranks(const TrainingRun& run, const std::vector<int64_t>& values) {
  if (run.world_size() == 1) return values;
  std::vector<torch::Tensor> t{torch::tensor(values, torch::kLong).to(run.device())};
  run.communicator().all_reduce(t, ReduceOp::max);
  const torch::Tensor host = t[0].cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

// The files of `info` this rank reads when resuming: all of an unsharded checkpoint; of a sharded
// one the common files and the shards whose ranges overlap this rank's (all of them when this run
// is not sharded).
std::function<bool(const std::string&)> files_read_by(const CheckpointStore& store, const CheckpointInfo& info,
                                                      const TrainingRun& run) {
  const auto theirs = store.sharding_of(info);
  if (!theirs) return nullptr;
  const auto& shards = run.optimizer_shards();
  std::set<std::string> needed;
  for (const int64_t q : overlapping_shards(*theirs, shards ? &shards->info()->pieces.at(static_cast<size_t>(run.rank())) : nullptr)) {
    for (const char* kind : {"weights", "optimizer"}) needed.insert(CheckpointStore::shard_file(q, theirs->world_size, kind));
  }
  return [needed](const std::string& name) { return name.rfind("shard-", 0) != 0 || needed.count(name) > 0; };
}

fs::path checkpoint_dir(const CheckpointOptions& options, const TrainingRun& run) {
  if (!options.dir().empty()) return options.dir();
  if (run.options().run_dir().empty()) {
    throw OptionError("dir", "checkpoint.dir is empty and trainer.run_dir is empty: nowhere to write checkpoints");
  }
  return fs::path(run.options().run_dir()) / "checkpoints";
}
}  // namespace

std::shared_ptr<const TrainingSnapshot> CheckpointPolicy::resume_from(const TrainingRun& run) {
  if (!resume_) {  // the first call: the candidates, newest first
    store_ = CheckpointStore(checkpoint_dir(options_, run));
    resume_.emplace();
    if (!options_.resume()) return nullptr;
    // Every rank resumes from the same checkpoint (a shared file system); only the writer tidies.
    if (run.rank() == 0) store_.remove_unfinished();
    const auto all = store_.list();
    resume_->candidates.assign(all.rbegin(), all.rend());
    if (const auto pointer = store_.latest_name(); pointer && !store_.latest()) {
      log::warn("checkpoint pointer " + (store_.root() / "latest").string() + " names '" + *pointer +
                "', which is not a checkpoint folder there: ignored; the newest checkpoint that verifies is used");
    }
  }
  if (!options_.resume()) return nullptr;
  // Each rank checks what it will read, and all take the newest that passed on every rank.
  auto& r = *resume_;
  while (r.next < r.candidates.size()) {
    const CheckpointInfo& candidate = r.candidates[r.next++];
    std::string reason;
    std::shared_ptr<TrainingSnapshot> snapshot;
    try {
      reason = store_.verify(candidate.dir, files_read_by(store_, candidate, run));
      if (reason.empty()) snapshot = std::make_shared<TrainingSnapshot>(store_.read(candidate));
    } catch (const std::exception& e) {
      reason = message_of(e);  // a file that verifies but does not load is as damaged
    }
    const bool failed_somewhere = run.world_size() > 1 ? run.communicator().any(!reason.empty()) : !reason.empty();
    if (failed_somewhere) {
      skipped(candidate, reason.empty() ? std::string("a file another rank reads failed its check (see that rank's log)") : reason,
              /*damaged=*/!reason.empty() && run.rank() == 0);
      continue;
    }
    log::info(c10::str("resuming from ", candidate.dir.string()));
    last_saved_step_ = candidate.step;
    return snapshot;
  }
  // Nothing left to resume from. Damaged checkpoints mean a run was here: a silent fresh start
  // would throw its progress away.
  const auto damaged = store_.damaged();
  if (!r.failures.empty() || !damaged.empty()) {
    std::string list;
    for (const auto& f : r.failures) list += "\n  " + f;
    for (const auto& d : damaged) list += "\n  " + d.string() + " (moved aside earlier)";
    throw CheckpointError(c10::str("no checkpoint in ", store_.root().string(), " can be resumed from, though some exist:", list,
                                   "\nStart from scratch anyway with --checkpoint.resume=false (the damaged folders stay for inspection)."));
  }
  return nullptr;
}

void CheckpointPolicy::resume_failed(const std::string& reason) {
  if (!resume_ || resume_->next == 0) return;
  skipped(resume_->candidates[resume_->next - 1], "restoring it failed: " + reason, /*damaged=*/false);
  last_saved_step_ = -1;
}

void CheckpointPolicy::skipped(const CheckpointInfo& candidate, const std::string& reason, bool damaged) {
  std::string where = candidate.dir.string();
  if (damaged) {  // out of the way, so it takes no keep_last slot and is not tried again
    try {
      where += " (moved aside to " + store_.move_aside(candidate.dir).filename().string() + ")";
    } catch (const std::exception& e) {
      where += c10::str(" (could not be moved aside: ", e.what(), ")");
    }
  }
  log::warn("checkpoint skipped: " + where + ": " + reason);
  resume_->failures.push_back(where + ": " + reason);
}

void CheckpointPolicy::on_fit_begin(const TrainingRun& run) {
  // The Trainer asks its resume source before this hook; added with add_policy alone, the run
  // would write checkpoints and never resume from them.
  if (!resume_) {
    throw OptionError("checkpoint", "CheckpointPolicy was added without being the Trainer's resume source: "
                                    "add it with add_checkpointing(trainer, policy)");
  }
  run_ = &run;
  resume_.reset();  // a later fit searches afresh
  store_ = CheckpointStore(checkpoint_dir(options_, run));
  if (options_.on_signal()) preemption::install();
  // One process: a signal from before the fit ends it here. Ranks stop together at the first
  // step's collective check instead (one rank alone leaving would strand the others).
  if (options_.on_signal() && run.world_size() == 1) preemption::stop_if_requested("starting the fit");
  // A marker from an earlier pre-emption has done its job once this run starts.
  if (run.rank() == 0 && !run.options().run_dir().empty()) {
    std::error_code ignored;
    fs::remove(fs::path(run.options().run_dir()) / kPreemptedMarker, ignored);
  }
  last_save_time_ = std::chrono::steady_clock::now();
}

void CheckpointPolicy::surface_errors() {
  if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) pending_.get();
}

void CheckpointPolicy::wait() {
  if (shard_write_) finish_sharded(/*block=*/true);
  if (pending_.valid()) pending_.get();
}

CheckpointWriteOptions CheckpointPolicy::write_options(int64_t step) const {
  CheckpointWriteOptions write_options;
  write_options.weights_dtype = options_.weights_dtype();
  write_options.config_toml = config_toml_;
  if (stage_observer_) {
    write_options.on_stage = [observer = stage_observer_, step](const std::string& stage) { observer(stage, step); };
  }
  return write_options;
}

void CheckpointPolicy::save(const TrainerState& state) {
  if (run_ == nullptr) throw TrainingError("CheckpointPolicy::save before the fit began");
  if (state.step == last_saved_step_) return;
  run_->check_finite(c10::str("the checkpoint of step ", state.step, ", not written"), /*weights=*/true);
  last_saved_step_ = state.step;
  if (run_->optimizer_shards()) {  // every rank holds a part: every rank writes it
    save_sharded(state);
    return;
  }
  if (run_->rank() != 0) return;  // replicas hold the same state: rank 0 writes it
  wait();  // one write at a time; its error, if any, surfaces here
  auto snapshot = std::make_shared<TrainingSnapshot>(run_->snapshot());
  const CheckpointWriteOptions write_options = this->write_options(state.step);
  last_save_time_ = std::chrono::steady_clock::now();
  auto job = [this, snapshot, write_options] {
    CheckpointInfo info = store_.write(*snapshot, write_options);
    apply_retention();
    log::info(c10::str("checkpoint written: ", info.dir.string()));
    return info;
  };
  if (options_.async()) {
    pending_ = std::async(std::launch::async, job);
  } else {
    job();
  }
}

void CheckpointPolicy::save_sharded(const TrainerState& state) {
  finish_sharded(/*block=*/true);  // one write at a time
  // Rank 0 makes the folder every rank writes into; all learn whether it could (or whether this
  // step is saved already) before anyone writes.
  int64_t begun = 1, failed = 0;
  std::string why;
  if (run_->rank() == 0) {
    try {
      begun = store_.begin_sharded(state.step) ? 1 : 0;
    } catch (const std::exception& e) {
      failed = 1;
      why = e.what();
    }
  }
  const std::vector<int64_t> agreed = max_across_ranks(*run_, {1 - begun, failed});
  if (agreed[1] != 0) {
    throw CheckpointError(why.empty() ? c10::str("rank 0 could not begin the checkpoint of step ", state.step, " (see its log)") : why);
  }
  if (agreed[0] != 0) return;  // saved already
  last_save_time_ = std::chrono::steady_clock::now();
  ShardWrite write;
  write.step = state.step;
  write.snapshot = std::make_shared<TrainingSnapshot>(run_->snapshot());
  auto job = [store = store_, snapshot = write.snapshot, options = write_options(state.step)] { return store.write_shard(*snapshot, options); };
  write.files = std::async(options_.async() ? std::launch::async : std::launch::deferred, job);
  shard_write_ = std::move(write);
  if (!options_.async()) finish_sharded(/*block=*/true);
}

void CheckpointPolicy::finish_sharded(bool block) {
  if (!shard_write_) return;
  ShardWrite& write = *shard_write_;
  if (!block) {
    const bool mine = write.files.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    if (run_->world_size() > 1 ? run_->communicator().any(!mine) : !mine) return;  // some rank is still writing
  }
  std::vector<FileRecord> files;
  std::string error;
  try {
    files = write.files.get();
  } catch (const std::exception& e) {
    error = e.what();
    log::error(error);
  }
  // Every rank's two shard files (size, CRC-32) and whether it failed, in one collective.
  const int64_t world = run_->world_size(), rank = run_->rank();
  std::vector<int64_t> table(static_cast<size_t>(1 + 4 * world), 0);
  table[0] = error.empty() ? 0 : 1;
  for (const auto& f : files) {
    for (int k = 0; k < 2; ++k) {
      if (f.name == CheckpointStore::shard_file(rank, world, k == 0 ? "weights" : "optimizer")) {
        table[static_cast<size_t>(1 + 4 * rank + 2 * k)] = static_cast<int64_t>(f.size);
        table[static_cast<size_t>(2 + 4 * rank + 2 * k)] = f.crc32;
      }
    }
  }
  table = max_across_ranks(*run_, table);
  const std::shared_ptr<TrainingSnapshot> snapshot = write.snapshot;
  shard_write_.reset();
  if (table[0] != 0) {
    throw CheckpointError(error.empty() ? c10::str("checkpoint of step ", snapshot->state.step,
                                                   ": another rank failed to write its shard (see its log); the previous checkpoint is kept")
                                        : error);
  }
  if (rank != 0) return;
  std::vector<FileRecord> records;
  for (const auto& f : files) {
    if (f.name.rfind("shard-", 0) != 0) records.push_back(f);  // rank 0's common files
  }
  for (int64_t r = 0; r < world; ++r) {
    for (int k = 0; k < 2; ++k) {
      records.push_back({CheckpointStore::shard_file(r, world, k == 0 ? "weights" : "optimizer"),
                         static_cast<uint64_t>(table[static_cast<size_t>(1 + 4 * r + 2 * k)]),
                         static_cast<uint32_t>(table[static_cast<size_t>(2 + 4 * r + 2 * k)])});
    }
  }
  const CheckpointInfo info = store_.finish_sharded(*snapshot, records, write_options(snapshot->state.step));
  apply_retention();
  log::info(c10::str("checkpoint written: ", info.dir.string(), " (", world, " shards)"));
}

void CheckpointPolicy::on_step_end(StepContext& ctx) {
  surface_errors();
  if (!ctx.boundary()) return;
  finish_sharded(/*block=*/false);
  const TrainerState& s = ctx.state();
  const bool by_steps = options_.every_n_steps() > 0 && s.step % options_.every_n_steps() == 0;
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_time_).count() / 60.0;
  bool by_time = options_.every_n_minutes() > 0 && minutes >= options_.every_n_minutes();
  // Clocks differ between ranks: rank 0's decides, so that every rank keeps the same cadence.
  if (options_.every_n_minutes() > 0 && run_->world_size() > 1) by_time = run_->communicator().any(by_time && run_->rank() == 0);
  if (by_steps || by_time) save(s);
}

void CheckpointPolicy::on_rolled_back(const TrainerState& state) {
  // The abandoned path's checkpoints have higher steps and would win a resume: they go, and the
  // rolled-back state (with the recovery ladder's decisions and the data it skips) is saved now.
  wait();
  finish_sharded(/*block=*/true);
  if (run_->rank() == 0) {
    for (const auto& info : store_.list()) {
      if (info.step >= state.step) store_.remove(info.dir);
    }
  }
  last_saved_step_ = -1;
  save(state);
}

void CheckpointPolicy::on_epoch_end(const TrainerState& state) {
  surface_errors();
  if (options_.every_epoch()) save(state);
}

std::optional<std::string> CheckpointPolicy::should_stop(const TrainerState& state) {
  if (!options_.on_signal() || run_ == nullptr) return std::nullopt;
  const int signal = preemption::requested();
  // A signal may reach the ranks at different steps: when any rank has one, all save and stop.
  const bool any_signal = run_->world_size() > 1 ? run_->communicator().any(signal != 0) : signal != 0;
  if (!any_signal) return std::nullopt;
  save(state);
  wait();  // the process may be killed soon after: the checkpoint must be on disk first
  preemption::clear();
  const char* by = signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "a signal to another rank";
  write_preempted_marker(state.step, by);
  return c10::str("pre-empted by ", by, ": checkpoint of step ", state.step,
                  " written, the next start resumes from it");
}

void CheckpointPolicy::write_preempted_marker(int64_t step, const char* by) const {
  if (run_->rank() != 0 || run_->options().run_dir().empty()) return;
  const fs::path marker = fs::path(run_->options().run_dir()) / kPreemptedMarker;
  const auto latest = store_.latest();
  const nlohmann::json j{{"preempted", true}, {"step", step}, {"by", by}, {"checkpoint", latest ? latest->string() : ""},
                         {"resume", "start the same command again: it resumes from the checkpoint"}};
  try {
    detail::write_file_synced(marker.string() + ".tmp", j.dump(1) + "\n");
    fs::rename(marker.string() + ".tmp", marker);
  } catch (const std::exception& e) {
    log::warn(c10::str("cannot write ", marker.string(), ": ", e.what()));
  }
}

std::optional<std::string> CheckpointPolicy::last_checkpoint() const {
  if (run_ == nullptr) return std::nullopt;
  const auto latest = store_.latest();
  return latest ? std::optional<std::string>(latest->string()) : std::nullopt;
}

void CheckpointPolicy::on_fit_end(const TrainingRun& run) {
  if (options_.at_end()) save(run.state());
  wait();
}

void CheckpointPolicy::apply_retention() const {
  auto all = store_.list();
  if (all.empty()) return;
  const auto latest = store_.latest();
  std::set<fs::path> keep;
  if (latest) keep.insert(*latest);
  const size_t n = all.size();
  if (options_.keep_last() == 0) {
    for (const auto& c : all) keep.insert(c.dir);
  } else {
    for (size_t i = n - std::min<size_t>(n, static_cast<size_t>(options_.keep_last())); i < n; ++i) keep.insert(all[i].dir);
  }
  std::set<fs::path> best;
  if (options_.keep_best() > 0) {
    std::vector<const CheckpointInfo*> scored;
    for (const auto& c : all) {
      auto it = c.metrics.find(options_.monitor());
      if (it != c.metrics.end() && std::isfinite(it->second)) scored.push_back(&c);
    }
    const bool min = options_.monitor_mode() == "min";
    std::stable_sort(scored.begin(), scored.end(), [&](const CheckpointInfo* a, const CheckpointInfo* b) {
      const double x = a->metrics.at(options_.monitor()), y = b->metrics.at(options_.monitor());
      return min ? x < y : x > y;
    });
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(options_.keep_best()); ++i) best.insert(scored[i]->dir);
  }
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& c : all) {
    if (best.count(c.dir)) continue;  // the best stay in place, whatever their age
    const bool stale = options_.archive_after_days() > 0 && c.unix_time > 0 &&
                       now - c.unix_time > options_.archive_after_days() * 86400.0 && !(latest && *latest == c.dir);
    if (keep.count(c.dir) && !stale) continue;
    if (!options_.archive_dir().empty()) {
      const fs::path cold(options_.archive_dir());
      fs::create_directories(cold);
      fs::path target = cold / c.dir.filename();
      if (fs::exists(target)) fs::remove_all(target);
      std::error_code ec;
      fs::rename(c.dir, target, ec);
      if (ec) {  // another file system: copy aside, rename into place, then remove
        const fs::path partial = target.string() + ".partial";
        fs::remove_all(partial);
        fs::copy(c.dir, partial, fs::copy_options::recursive);
        fs::rename(partial, target);
        store_.remove(c.dir);
      }
      log::info("checkpoint archived: " + c.dir.string() + " -> " + target.string());
    } else {
      store_.remove(c.dir);
      log::debug("checkpoint removed: " + c.dir.string());
    }
  }
}

void add_checkpointing(Trainer& trainer, std::shared_ptr<CheckpointPolicy> checkpointing) {
  if (!checkpointing) throw OptionError("checkpoint", "add_checkpointing: the policy is null");
  trainer.add_policy(checkpointing);
  trainer.set_resume_source(std::move(checkpointing));
}

}  // namespace frugal
