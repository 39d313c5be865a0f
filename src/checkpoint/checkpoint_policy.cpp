#include "frugal/checkpoint/checkpoint_policy.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "base/checkpoint_names.hpp"
#include "base/durable_io.hpp"
#include "frugal/base/preemption.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/base/communicator.hpp"
#include "frugal/distributed/optimizer_shards.hpp"
#include "frugal/log.hpp"
#include "frugal/remote/checkpoint_uploader.hpp"
#include "frugal/remote/prefix_lease.hpp"

namespace frugal {

namespace fs = std::filesystem;

constexpr const char* kPreemptedMarker = "PREEMPTED";

struct CheckpointPolicy::Remote {
  std::shared_ptr<RemoteCheckpoints> store;
  /// Rank 0's hold on the prefix (released after the uploader stops: declared before it).
  std::shared_ptr<PrefixLease> lease;
  /// Rank 0's (it uploads unsharded checkpoints and commits); with a sharded optimizer every
  /// rank has one for its own shard files.
  std::unique_ptr<CheckpointUploader> uploader;
  int64_t newest_at_start = -1;            // the newest committed remote step when the fit began
  std::atomic<int64_t> last_submitted{-1};  // unsharded: the newest checkpoint handed to the uploader
  std::optional<int64_t> sharded_step;      // sharded: the newest checkpoint being uploaded by every rank
  int64_t last_commit_submitted = -1;       // sharded, rank 0: the newest commit handed to the uploader
  int64_t commit_awaited = -1;              // the newest step whose commit a wait saw (not waited for again)
  /// Sharded: this rank's staged files of `step` go up; the commit waits for every rank's.
  void submit_shard_upload(int64_t step, std::vector<std::string> files);
};

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
  if (!remote().empty()) S3Location::parse(remote(), "remote");
  if (remote_addressing() != "auto" && remote_addressing() != "path" && remote_addressing() != "virtual") {
    throw OptionError("remote_addressing", "remote_addressing must be auto, path or virtual, got '" + remote_addressing() + "'");
  }
  if (!(remote_deadline_seconds() > 0)) {
    throw OptionError("remote_deadline_seconds", c10::str("remote_deadline_seconds must be > 0, got ", remote_deadline_seconds()));
  }
  if (remote_part_mb() < 5 || remote_part_mb() > 5120) {
    throw OptionError("remote_part_mb", c10::str("remote_part_mb must be 5..5120 (S3's part sizes), got ", remote_part_mb()));
  }
  if (remote_parallel_parts() < 1 || remote_parallel_parts() > 64) {
    throw OptionError("remote_parallel_parts", c10::str("remote_parallel_parts must be 1..64, got ", remote_parallel_parts()));
  }
  if (!(remote_lease_seconds() > 0) || !std::isfinite(remote_lease_seconds())) {
    throw OptionError("remote_lease_seconds", c10::str("remote_lease_seconds must be > 0, got ", remote_lease_seconds()));
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
    if (!options_.remote().empty()) open_remote(run);
    if (!options_.resume()) return nullptr;
    // Every rank resumes from the same checkpoint (a shared file system); only the writer tidies.
    if (run.rank() == 0) store_.remove_unfinished();
    if (remote_) {  // a newer remote checkpoint is downloaded into the directory, then found there
      std::vector<std::string> skipped;
      std::string error;
      if (run.rank() == 0) {
        try {
          skipped = fetch_newer_remote();
        } catch (const std::exception& e) {
          error = message_of(e);
        }
      }
      // Every rank learns the outcome (one collective), so that none waits alone for the others.
      const auto outcome = max_across_ranks(run, {error.empty() ? 0 : 1, skipped.empty() ? 0 : 1});
      if (outcome[0] != 0) throw CheckpointError(error.empty() ? std::string("rank 0 could not fetch the remote checkpoint (see its log)") : error);
      if (outcome[1] != 0 && skipped.empty()) skipped.push_back("a remote checkpoint failed its check (see rank 0's log)");
      for (const auto& reason : skipped) resume_->failures.push_back(reason);
    }
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
    // A local checkpoint the store lacks (the upload was cut off) goes up now.
    if (remote_ && remote_->uploader && run.rank() == 0 && !store_.sharding_of(candidate) && candidate.step > remote_->newest_at_start) {
      submit_upload(candidate);
    }
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
    submit_upload(info);  // before retention may delete the folder
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
  // Every rank's two shard files (size, XXH3 as two 32-bit halves: the collective takes a maximum
  // of signed values) and whether it failed, in one collective.
  const int64_t world = run_->world_size(), rank = run_->rank();
  std::vector<int64_t> table(static_cast<size_t>(1 + 6 * world), 0);
  table[0] = error.empty() ? 0 : 1;
  for (const auto& f : files) {
    for (int k = 0; k < 2; ++k) {
      if (f.name == CheckpointStore::shard_file(rank, world, k == 0 ? "weights" : "optimizer")) {
        const size_t at = static_cast<size_t>(1 + 6 * rank + 3 * k);
        table[at] = static_cast<int64_t>(f.size);
        table[at + 1] = static_cast<int64_t>(f.xxh3 >> 32);
        table[at + 2] = static_cast<int64_t>(f.xxh3 & 0xffffffffu);
      }
    }
  }
  // Each rank's files go to the store from links taken now: rank 0 renames the folder next.
  const int64_t step = write.snapshot->state.step;
  std::vector<std::string> to_upload;
  if (remote_ && remote_->uploader && error.empty()) {
    for (const auto& f : files) to_upload.push_back(f.name);
    try {
      remote_->uploader->stage(store_.root() / (detail::checkpoint_folder_name(step) + ".tmp"), step, to_upload);
    } catch (const std::exception& e) {
      log::warn(c10::str("the shard files of step ", step, " cannot be staged for upload: ", e.what(), " (they stay local)"));
      to_upload.clear();
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
  if (rank != 0) {
    if (remote_) remote_->submit_shard_upload(step, std::move(to_upload));
    return;
  }
  std::vector<FileRecord> records;
  for (const auto& f : files) {
    if (f.name.rfind("shard-", 0) != 0) records.push_back(f);  // rank 0's common files
  }
  for (int64_t r = 0; r < world; ++r) {
    for (int k = 0; k < 2; ++k) {
      const size_t at = static_cast<size_t>(1 + 6 * r + 3 * k);
      records.push_back({CheckpointStore::shard_file(r, world, k == 0 ? "weights" : "optimizer"), static_cast<uint64_t>(table[at]),
                         (static_cast<uint64_t>(table[at + 1]) << 32) | static_cast<uint64_t>(table[at + 2])});
    }
  }

  const CheckpointInfo info = store_.finish_sharded(*snapshot, records, write_options(snapshot->state.step));
  if (remote_ && !to_upload.empty()) {  // rank 0 also sends meta.json, and keeps the manifest for the commit
    remote_->uploader->stage(info.dir, step, {"meta.json", "manifest.json"});
    to_upload.push_back("meta.json");
  }
  if (remote_) remote_->submit_shard_upload(step, std::move(to_upload));
  apply_retention();
  log::info(c10::str("checkpoint written: ", info.dir.string(), " (", world, " shards)"));
}

void CheckpointPolicy::on_step_end(StepContext& ctx) {
  surface_errors();
  if (!ctx.boundary()) return;
  finish_sharded(/*block=*/false);
  advance_remote_commit(/*block=*/false, {});
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
  const auto notice = std::chrono::steady_clock::now();
  save(state);
  wait();  // the process may be killed soon after: the checkpoint must be on disk first
  preemption::clear();
  // Only the newest checkpoint matters now: an older one still uploading gives way to it.
  if (remote_ && remote_->uploader) remote_->uploader->cancel_older(state.step);
  const char* by = signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "a signal to another rank";
  const std::string remote_failure = wait_remote_commit(notice);
  write_preempted_marker(state.step, by, remote_failure);
  const auto latest = store_.latest();
  if (!remote_failure.empty()) {
    throw CheckpointError(c10::str("pre-empted by ", by, ": the checkpoint of step ", state.step, " is only local (",
                                   latest ? latest->string() : store_.root().string(), "), not committed to ", options_.remote(), ": ",
                                   remote_failure, ". A fresh machine would resume from an older remote checkpoint."));
  }
  if (remote_) {
    return c10::str("pre-empted by ", by, ": checkpoint of step ", state.step, " written and committed to ",
                    remote_->store->url_of(latest ? latest->filename().string() : std::string()), ", the next start resumes from it");
  }
  return c10::str("pre-empted by ", by, ": checkpoint of step ", state.step,
                  " written, the next start resumes from it");
}

void CheckpointPolicy::write_preempted_marker(int64_t step, const char* by, const std::string& remote_failure) const {
  if (run_->rank() != 0 || run_->options().run_dir().empty()) return;
  const fs::path marker = fs::path(run_->options().run_dir()) / kPreemptedMarker;
  const auto latest = store_.latest();
  nlohmann::json j{{"preempted", true}, {"step", step}, {"by", by}, {"checkpoint", latest ? latest->string() : ""},
                   {"resume", "start the same command again: it resumes from the checkpoint"}};
  if (remote_) {
    j["remote_checkpoint"] = remote_failure.empty() && latest ? remote_->store->url_of(latest->filename().string()) : "";
    j["remote_committed"] = remote_failure.empty();
    if (!remote_failure.empty()) j["remote_error"] = remote_failure;
    j["resume"] = "start the same command again, on this machine or a fresh one: it resumes from the newest committed checkpoint";
  }
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
  const std::string remote_failure = wait_remote_commit(std::chrono::steady_clock::now());
  close_remote();
  if (!remote_failure.empty()) {
    const auto latest = store_.latest();
    throw CheckpointError(c10::str("the final checkpoint (", latest ? latest->string() : store_.root().string(), ") is only local: it was not committed to ",
                                   options_.remote(), ": ", remote_failure));
  }
}

S3ClientOptions CheckpointPolicy::remote_client_options() const {
  S3ClientOptions o;
  o.endpoint = options_.remote_endpoint();
  o.region = options_.remote_region();
  o.addressing = options_.remote_addressing();
  o.part_bytes = static_cast<uint64_t>(options_.remote_part_mb()) << 20;
  o.parallel_parts = static_cast<int>(options_.remote_parallel_parts());
  return o;
}

void CheckpointPolicy::open_remote(const TrainingRun& run) {
  remote_.reset();
  auto store = std::make_shared<RemoteCheckpoints>(S3Location::parse(options_.remote(), "checkpoint.remote"), remote_client_options());
  try {
    store->client().check_access();
  } catch (const RemoteStorageError& e) {
    throw CheckpointError(c10::str("checkpoint.remote = ", options_.remote(), " cannot be used: ", e.what()));
  }
  auto remote = std::make_unique<Remote>();
  remote->store = store;
  // Rank 0 writes the prefix: it takes the prefix's lease first (another live run there is
  // refused, naming it, before anything is touched), then tidies what a killed run left.
  std::string error;
  if (run.rank() == 0) {
    try {
      remote->lease = PrefixLease::acquire(S3Location::parse(options_.remote(), "checkpoint.remote"), remote_client_options(),
                                           {options_.remote_lease_seconds(), run.options().run_dir()});
      store->set_lease(remote->lease);
      store->remove_unfinished();
      const auto committed = store->committed();
      if (!committed.empty()) remote->newest_at_start = committed.back().step;
    } catch (const std::exception& e) {
      error = message_of(e);
    }
  }
  if (max_across_ranks(run, {error.empty() ? 0 : 1})[0] != 0) {
    throw CheckpointError(error.empty() ? std::string("rank 0 could not take checkpoint.remote's lease (see its log)") : error);
  }
  // Rank 0 uploads and commits; with a sharded optimizer every rank uploads its own shards.
  if (run.rank() == 0 || run.optimizer_shards()) {
    RemoteRetention retention{options_.keep_last(), options_.keep_best(), options_.monitor(), options_.monitor_mode()};
    const fs::path staging = store_.root() / ".uploads" / c10::str("rank-", run.rank());
    remote->uploader = std::make_unique<CheckpointUploader>(store, staging, retention);
    if (upload_observer_) remote->uploader->set_stage_observer(upload_observer_);
  }
  remote_ = std::move(remote);
}

std::vector<std::string> CheckpointPolicy::fetch_newer_remote() {
  std::vector<std::string> skipped;
  int64_t local_newest = -1;
  if (const auto found = store_.find_latest_valid()) local_newest = found->info.step;
  RemoteCheckpoints& remote = *remote_->store;
  std::vector<RemoteCheckpoint> committed;
  try {
    committed = remote.committed();
  } catch (const std::exception& e) {
    throw CheckpointError(c10::str("cannot list the remote checkpoints in ", options_.remote(), ": ", message_of(e)));
  }
  for (auto it = committed.rbegin(); it != committed.rend() && it->step > local_newest; ++it) {
    const fs::path target = store_.root() / (it->name + ".tmp");
    std::error_code ignored;
    fs::remove_all(target, ignored);
    std::string reason;
    try {
      reason = remote.download(it->name, target);
      if (reason.empty()) reason = store_.verify(target);
    } catch (const std::exception& e) {
      reason = message_of(e);
    }
    if (!reason.empty()) {
      fs::remove_all(target, ignored);
      const std::string where = remote.url_of(it->name);
      log::warn("remote checkpoint skipped: " + where + ": " + reason);
      skipped.push_back(where + ": " + reason);
      continue;
    }
    const fs::path final_dir = store_.adopt(target, it->name);
    log::info("downloaded the remote checkpoint " + remote.url_of(it->name) + " to " + final_dir.string());
    break;
  }
  return skipped;
}

void CheckpointPolicy::Remote::submit_shard_upload(int64_t step, std::vector<std::string> files) {
  if (!uploader) return;
  // A rank whose files could not be staged submits nothing: the commit then finds its upload
  // missing on that rank, and the checkpoint stays local.
  if (!files.empty()) uploader->submit(step, std::move(files), /*commit=*/false);
  sharded_step = step;
}

void CheckpointPolicy::submit_upload(const CheckpointInfo& info) {
  if (!remote_ || !remote_->uploader) return;
  remote_->uploader->submit(info.dir, info.step);
  remote_->last_submitted = info.step;
}

std::string CheckpointPolicy::advance_remote_commit(bool block, std::chrono::steady_clock::time_point deadline) {
  if (!remote_ || !remote_->sharded_step) return "";
  const int64_t step = *remote_->sharded_step;
  CheckpointUploader& uploader = *remote_->uploader;
  std::string mine;
  if (block) {
    mine = uploader.wait_uploaded(step, deadline);
  } else {
    const auto progress = uploader.upload_progress(step);
    // Some rank still uploading: ask again at the next step.
    if (run_->communicator().any(progress == CheckpointUploader::Progress::pending)) return "";
    if (progress == CheckpointUploader::Progress::failed) mine = "its upload failed or a newer checkpoint replaced it";
  }
  remote_->sharded_step.reset();
  if (run_->communicator().any(!mine.empty())) {
    const std::string why = mine.empty() ? "another rank could not upload its shard files (see its log)" : mine;
    log::warn(c10::str("the sharded checkpoint of step ", step, " is not committed remotely: ", why));
    return why;
  }
  if (run_->rank() == 0) {  // every rank's files are in the store: the manifest commits them
    uploader.submit(step, {}, /*commit=*/true);
    remote_->last_commit_submitted = step;
  }
  return "";
}

std::string CheckpointPolicy::wait_remote_commit(std::chrono::steady_clock::time_point since) {
  if (!remote_) return "";
  const auto deadline = since + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(options_.remote_deadline_seconds()));
  std::string why = advance_remote_commit(/*block=*/true, deadline);
  const int64_t step = run_->optimizer_shards() ? remote_->last_commit_submitted : remote_->last_submitted.load();
  if (why.empty() && run_->rank() == 0 && remote_->uploader && step >= 0 && step > remote_->commit_awaited) {
    log::info(c10::str("waiting for the checkpoint of step ", step, " to be committed to ", options_.remote(), " (at most ",
                       options_.remote_deadline_seconds(), " s from ", run_->optimizer_shards() ? "now" : "the request", ")"));
    why = remote_->uploader->wait_committed(step, deadline);
    if (why.empty()) remote_->commit_awaited = step;
  }
  const bool failed = run_->world_size() > 1 ? run_->communicator().any(!why.empty()) : !why.empty();
  if (failed && why.empty()) why = "rank 0 could not commit it (see its log)";
  return why;
}

void CheckpointPolicy::close_remote() {
  if (!remote_) return;
  remote_->uploader.reset();
  remote_->store->set_lease(nullptr);
  remote_.reset();  // the lease goes with it: released
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
