#include "frugal/checkpoint/checkpoint_policy.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "base/durable_io.hpp"
#include "checkpoint/checkpoint_writes.hpp"
#include "checkpoint/rank_votes.hpp"
#include "frugal/base/preemption.hpp"
#include "frugal/checkpoint/local_destination.hpp"
#include "frugal/core/trainer.hpp"
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
  if (archive_after_days() < 0) {
    throw OptionError("archive_after_days", c10::str("archive_after_days must be >= 0, got ", archive_after_days()));
  }
  remote().validate();
}

CheckpointPolicy::CheckpointPolicy(CheckpointOptions options, std::string config_toml)
    : options_(std::move(options)), config_toml_(std::move(config_toml)), store_(options_.dir()) {
  options_.validate();
  destinations_ = standard_destinations(options_);
  local_ = std::dynamic_pointer_cast<LocalDestination>(destinations_.front());
}

CheckpointPolicy::~CheckpointPolicy() {
  // A fit that threw leaves a write in flight: let it finish, so the directory stays consistent.
  if (writes_) writes_->drain();
}

void CheckpointPolicy::add_destination(std::shared_ptr<CheckpointDestination> destination) {
  if (!destination) throw OptionError("checkpoint", "add_destination: the destination is null");
  if (run_ != nullptr) throw OptionError("checkpoint", "add_destination after the fit began: add " + destination->name() + " before it");
  if (destination_observer_) destination->set_stage_observer(destination_observer_);
  destinations_.push_back(std::move(destination));
}

void CheckpointPolicy::set_destination_stage_observer(std::function<void(const std::string& stage, int64_t step)> observer) {
  destination_observer_ = observer;
  for (const auto& d : destinations_) d->set_stage_observer(observer);
}

namespace {
// The files of `info` this rank reads when resuming: all of an unsharded checkpoint; of a sharded
// one the common files and the shards whose ranges overlap this rank's (all of them when this run
// is not sharded).
std::function<bool(const std::string&)> files_read_by(const CheckpointStore& store, const CheckpointInfo& info,
                                                      const TrainingRun& run) {
  const auto theirs = store.sharding_of(info);
  if (!theirs) return nullptr;
  const auto mine = run.optimizer_sharding();
  std::set<std::string> needed;
  for (const int64_t q : overlapping_shards(*theirs, mine ? &mine->pieces.at(static_cast<size_t>(run.rank())) : nullptr)) {
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
    for (const auto& d : destinations_) d->open(run, store_);
    if (!options_.resume()) return nullptr;
    // Every rank resumes from the same checkpoint (a shared file system); only the writer tidies.
    if (run.rank() == 0) store_.remove_unfinished();
    // A destination's newer checkpoint is brought into the directory, then found there.
    for (const auto& d : destinations_) {
      for (auto& reason : d->fetch_newer()) resume_->failures.push_back(std::move(reason));
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
    const bool failed_somewhere = run.any_rank(!reason.empty());
    if (failed_somewhere) {
      skipped(candidate, reason.empty() ? std::string("a file another rank reads failed its check (see that rank's log)") : reason,
              /*damaged=*/!reason.empty() && run.rank() == 0);
      continue;
    }
    log::info(c10::str("resuming from ", candidate.dir.string()));
    last_saved_step_ = candidate.step;
    for (const auto& d : destinations_) d->resumed_from(candidate);
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
  WriteContext context{&run, &store_, destinations_, options_.async(), [this](int64_t step) { return write_options(step); }};
  writes_ = run.optimizer_sharding() ? sharded_writes(std::move(context)) : unsharded_writes(std::move(context));
  last_save_time_ = std::chrono::steady_clock::now();
}

void CheckpointPolicy::wait() {
  if (writes_) writes_->wait();
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
  if (run_ == nullptr || !writes_) throw TrainingError("CheckpointPolicy::save before the fit began");
  if (state.step == last_saved_step_) return;
  // The weights too, unless the writer checks its own copy of them (off the training thread).
  run_->check_finite(c10::str("the checkpoint of step ", state.step, ", not written"), /*weights=*/!writes_->checks_weights());
  last_saved_step_ = state.step;
  last_save_time_ = std::chrono::steady_clock::now();
  writes_->save(state);
}

void CheckpointPolicy::on_step_end(StepContext& ctx) {
  writes_->surface_errors();
  if (!ctx.boundary()) return;
  writes_->progress();
  for (const auto& d : destinations_) d->at_boundary();
  const TrainerState& s = ctx.state();
  const bool by_steps = options_.every_n_steps() > 0 && s.step % options_.every_n_steps() == 0;
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_time_).count() / 60.0;
  bool by_time = options_.every_n_minutes() > 0 && minutes >= options_.every_n_minutes();
  // Clocks differ between ranks: rank 0's decides, so that every rank keeps the same cadence.
  if (options_.every_n_minutes() > 0 && run_->world_size() > 1) by_time = run_->any_rank(by_time && run_->rank() == 0);
  if (by_steps || by_time) save(s);
}

void CheckpointPolicy::on_rolled_back(const TrainerState& state) {
  // The abandoned path's checkpoints have higher steps and would win a resume: they go, and the
  // rolled-back state (with the recovery ladder's decisions and the data it skips) is saved now.
  wait();
  if (run_->rank() == 0) {
    for (const auto& info : store_.list()) {
      if (info.step >= state.step) store_.remove(info.dir);
    }
  }
  last_saved_step_ = -1;
  save(state);
}

void CheckpointPolicy::on_epoch_end(const TrainerState& state) {
  if (writes_) writes_->surface_errors();
  if (options_.every_epoch()) save(state);
}

std::optional<std::string> CheckpointPolicy::should_stop(const TrainerState& state) {
  if (!options_.on_signal() || run_ == nullptr) return std::nullopt;
  const int signal = preemption::requested();
  // A signal may reach the ranks at different steps: when any rank has one, all save and stop.
  const bool any_signal = run_->any_rank(signal != 0);
  if (!any_signal) return std::nullopt;
  const auto notice = std::chrono::steady_clock::now();
  save(state);
  wait();  // the process may be killed soon after: the checkpoint must be on disk first
  preemption::clear();
  // Only the newest checkpoint matters now: older work still in flight gives way to it.
  for (const auto& d : destinations_) d->preempted(state.step);
  const char* by = signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "a signal to another rank";
  const std::vector<std::string> commits = wait_committed(notice);
  write_preempted_marker(state.step, by, commits);
  const auto latest = store_.latest();
  const std::string name = latest ? latest->filename().string() : std::string();
  std::string committed_to;
  for (size_t i = 0; i < destinations_.size(); ++i) {
    const auto& d = *destinations_[i];
    if (!commits[i].empty()) {
      throw CheckpointError(c10::str("pre-empted by ", by, ": the checkpoint of step ", state.step, " is only local (",
                                     latest ? latest->string() : store_.root().string(), "), not committed to ", d.where(), ": ",
                                     commits[i], ". A fresh machine would resume from an older checkpoint there."));
    }
    if (d.off_machine()) committed_to += (committed_to.empty() ? "" : " and ") + d.location_of(name);
  }
  if (!committed_to.empty()) {
    return c10::str("pre-empted by ", by, ": checkpoint of step ", state.step, " written and committed to ", committed_to,
                    ", the next start resumes from it");
  }
  return c10::str("pre-empted by ", by, ": checkpoint of step ", state.step,
                  " written, the next start resumes from it");
}

std::vector<std::string> CheckpointPolicy::wait_committed(std::chrono::steady_clock::time_point since) {
  std::vector<std::string> out;
  for (const auto& d : destinations_) out.push_back(d->wait_committed(since));
  return out;
}

void CheckpointPolicy::write_preempted_marker(int64_t step, const char* by, const std::vector<std::string>& commits) const {
  if (run_->rank() != 0 || run_->options().run_dir().empty()) return;
  const fs::path marker = fs::path(run_->options().run_dir()) / kPreemptedMarker;
  const auto latest = store_.latest();
  nlohmann::json j{{"preempted", true}, {"step", step}, {"by", by}, {"checkpoint", latest ? latest->string() : ""},
                   {"resume", "start the same command again: it resumes from the checkpoint"}};
  for (size_t i = 0; i < destinations_.size(); ++i) {
    const auto& d = *destinations_[i];
    if (!d.off_machine()) continue;
    const bool committed = commits[i].empty();
    j[d.name() + "_checkpoint"] = committed && latest ? d.location_of(latest->filename().string()) : "";
    j[d.name() + "_committed"] = committed;
    if (!committed) j[d.name() + "_error"] = commits[i];
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
  const std::vector<std::string> commits = wait_committed(std::chrono::steady_clock::now());
  for (const auto& d : destinations_) d->close();
  for (size_t i = 0; i < destinations_.size(); ++i) {
    if (commits[i].empty()) continue;
    const auto latest = store_.latest();
    throw CheckpointError(c10::str("the final checkpoint (", latest ? latest->string() : store_.root().string(),
                                   ") is only local: it was not committed to ", destinations_[i]->where(), ": ", commits[i]));
  }
}

void CheckpointPolicy::apply_retention() const {
  local_->apply_retention(store_);
  for (const auto& d : destinations_) {
    if (d != local_) d->apply_retention();
  }
}

void add_checkpointing(Trainer& trainer, std::shared_ptr<CheckpointPolicy> checkpointing) {
  if (!checkpointing) throw OptionError("checkpoint", "add_checkpointing: the policy is null");
  trainer.add_policy(checkpointing);
  trainer.set_resume_source(std::move(checkpointing));
}

}  // namespace frugal
