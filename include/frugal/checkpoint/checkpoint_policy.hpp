#pragma once
// Checkpointing as a policy: saves on a cadence (every N optimizer steps, every T minutes, every
// epoch) and when the job is pre-empted (SIGTERM/SIGUSR1), keeps the last N plus the best K by a
// validation metric, moves stale ones to a cold directory, and resumes a run from the newest
// valid checkpoint. Saves are asynchronous: the snapshot is staged (frugal/base/staged_snapshot.hpp),
// and a background thread copies the weights and the optimizer's state to host memory, beside the
// next step's forward and backward, then writes; a new save waits for the previous one, and a
// failed write surfaces as a CheckpointError at the next hook.
//
// With a sharded optimizer every rank writes its own shard (checkpoint_store.hpp) on its own
// background thread; at each later optimizer step the ranks ask one another whether all shards
// are durable, and once they are, rank 0 records every rank's files in the manifest and publishes
// the checkpoint. Until then the previous checkpoint is the latest. Resuming, each rank checks
// the files it will read (its own shard, or those that overlap its part after a change of world
// size), and the ranks agree on the newest checkpoint that passed everywhere.
//
// Where checkpoints go besides the local directory is not the policy's business: each destination
// (checkpoint_destination.hpp) hears of every published checkpoint, and a pre-emption and the end
// of a fit wait for each one's commit. `remote` adds object storage (frugal/checkpoint/remote_destination.hpp);
// add_destination adds any other. The write strategy (unsharded, or one shard per rank) is chosen
// once when the fit begins.
//
// It is also the Trainer's resume source: add it with add_checkpointing, which does both.
//
//   frugal::add_checkpointing(trainer, std::make_shared<frugal::CheckpointPolicy>(
//       frugal::CheckpointOptions().every_n_steps(500).keep_last(3).keep_best(1).monitor("loss")));

#include <torch/arg.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "frugal/base/monitor_mode.hpp"
#include "frugal/checkpoint/checkpoint_destination.hpp"
#include "frugal/checkpoint/checkpoint_store.hpp"
#include "frugal/base/retention.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/core/resume_source.hpp"
#include "frugal/remote/remote_options.hpp"

namespace frugal {

class CheckpointWrites;
class LocalDestination;
class Trainer;

struct CheckpointOptions {
  /// Where checkpoints go; "" = <trainer.run_dir>/checkpoints.
  TORCH_ARG(std::string, dir) = "";
  TORCH_ARG(int64_t, every_n_steps) = 0;    // 0 = off
  TORCH_ARG(double, every_n_minutes) = 0;   // 0 = off
  TORCH_ARG(bool, every_epoch) = false;
  TORCH_ARG(bool, at_end) = true;           // when the fit ends
  TORCH_ARG(int64_t, keep_last) = 3;        // 0 = keep all
  TORCH_ARG(int64_t, keep_best) = 0;        // by `monitor`
  TORCH_ARG(std::string, monitor) = "loss";
  TORCH_ARG(MonitorMode, monitor_mode) = MonitorMode::min;
  TORCH_ARG(Precision, weights_dtype) = Precision::fp32;
  /// Checkpoints beyond retention, or older than archive_after_days, move here instead of being
  /// deleted ("" = delete); the best ones stay in place.
  TORCH_ARG(std::string, archive_dir) = "";
  TORCH_ARG(double, archive_after_days) = 0;  // 0 = only by retention
  TORCH_ARG(bool, async) = true;
  TORCH_ARG(bool, resume) = true;           // continue from the newest valid checkpoint
  TORCH_ARG(bool, on_signal) = true;        // SIGTERM/SIGUSR1: checkpoint and stop
  /// Object storage (s3://bucket/prefix) as a second destination; off while its url is "".
  TORCH_ARG(RemoteOptions, remote) = {};

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
  /// keep_last, keep_best, monitor and monitor_mode as the rule every destination applies.
  RetentionRule retention() const { return {keep_last(), keep_best(), monitor(), monitor_mode()}; }
};

/// The destinations `options` describe: the local directory, and object storage when
/// options.remote() is on.
std::vector<std::shared_ptr<CheckpointDestination>> standard_destinations(const CheckpointOptions& options);

class CheckpointPolicy : public Policy, public ResumeSource {
 public:
  explicit CheckpointPolicy(CheckpointOptions options = {}, std::string config_toml = "");
  ~CheckpointPolicy() override;
  std::string name() const override { return "checkpoint"; }
  PolicyPhase phase() const override { return PolicyPhase::persistence; }

  /// The newest checkpoint that verifies and loads on every rank; called again after a
  /// resume_failed, the next older one. Checkpoints that fail their check are moved aside
  /// (<dir>.damaged). CheckpointError when checkpoints exist but none can be resumed from.
  std::shared_ptr<const TrainingSnapshot> resume_from(const TrainingRun& run) override;
  void resume_failed(const std::string& reason) override;
  void on_fit_begin(const TrainingRun& run) override;
  void on_step_end(StepContext& ctx) override;
  /// Checkpoints newer than `state` are of an abandoned path: removed, and one of `state` written.
  void on_rolled_back(const TrainerState& state) override;
  void on_epoch_end(const TrainerState& state) override;
  std::optional<std::string> should_stop(const TrainerState& state) override;
  void on_fit_end(const TrainingRun& run) override;
  std::optional<std::string> last_checkpoint() const override;

  /// Writes a checkpoint of the trainer now (asynchronously if configured).
  void save(const TrainerState& state);
  /// Waits for the write in flight; rethrows its error.
  void wait();
  const CheckpointStore& store() const { return store_; }
  /// Applies keep_last / keep_best / archiving to the store now (also done after each save).
  void apply_retention() const;
  /// Told each stage of each write (see CheckpointWriteOptions::on_stage), on the writer thread.
  void set_stage_observer(std::function<void(const std::string& stage, int64_t step)> observer) {
    stage_observer_ = std::move(observer);
  }
  /// Adds a destination beside those `options` describe (before the fit).
  void add_destination(std::shared_ptr<CheckpointDestination> destination);
  const std::vector<std::shared_ptr<CheckpointDestination>>& destinations() const { return destinations_; }
  /// Told each stage of each destination's own work (an upload's "part", a file's name,
  /// "manifest.json", "latest"), on the thread doing it. Set before the fit.
  void set_destination_stage_observer(std::function<void(const std::string& stage, int64_t step)> observer);

 private:
  /// Every destination's commit of the newest checkpoint, waited for from `since`: "" for each
  /// that has it, else why not (in destinations_' order).
  std::vector<std::string> wait_committed(std::chrono::steady_clock::time_point since);
  /// Rank 0: <run_dir>/PREEMPTED (JSON: step, signal, checkpoint, each destination's commit), for
  /// a scheduler script to tell a pre-emption (resume me) from a failure; removed when the next
  /// fit starts.
  void write_preempted_marker(int64_t step, const char* by, const std::vector<std::string>& commits) const;
  /// Logs and records a candidate that cannot be resumed from; `damaged`: moves it aside.
  void skipped(const CheckpointInfo& candidate, const std::string& reason, bool damaged);
  CheckpointWriteOptions write_options(int64_t step) const;

  CheckpointOptions options_;
  std::string config_toml_;
  CheckpointStore store_;
  std::shared_ptr<LocalDestination> local_;
  std::vector<std::shared_ptr<CheckpointDestination>> destinations_;  // local_ first
  std::unique_ptr<CheckpointWrites> writes_;  // chosen when the fit begins
  const TrainingRun* run_ = nullptr;
  int64_t last_saved_step_ = -1;
  struct Resume {  // where the search for a checkpoint to resume from is
    std::vector<CheckpointInfo> candidates;  // newest first
    size_t next = 0;
    std::vector<std::string> failures;  // "<dir>: <reason>" of each one skipped
  };
  std::optional<Resume> resume_;
  std::chrono::steady_clock::time_point last_save_time_;
  std::function<void(const std::string&, int64_t)> stage_observer_;        // the local writer's stages
  std::function<void(const std::string&, int64_t)> destination_observer_;  // the destinations' stages
};

/// Adds `checkpointing` to `trainer` as a policy and as its resume source.
void add_checkpointing(Trainer& trainer, std::shared_ptr<CheckpointPolicy> checkpointing);

}  // namespace frugal
