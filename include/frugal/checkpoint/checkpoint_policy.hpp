#pragma once
// Checkpointing as a policy: saves on a cadence (every N optimizer steps, every T minutes, every
// epoch) and when the job is pre-empted (SIGTERM/SIGUSR1), keeps the last N plus the best K by a
// validation metric, moves stale ones to a cold directory, and resumes a run from the newest
// valid checkpoint. Saves are asynchronous: the state is copied to host memory on the training
// thread and written by a background thread; a new save waits for the previous one, and a failed
// write surfaces as a CheckpointError at the next hook.
//
// With a sharded optimizer every rank writes its own shard (checkpoint_store.hpp) on its own
// background thread; at each later optimizer step the ranks ask one another whether all shards
// are durable, and once they are, rank 0 records every rank's files in the manifest and publishes
// the checkpoint. Until then the previous checkpoint is the latest. Resuming, each rank checks
// the files it will read (its own shard, or those that overlap its part after a change of world
// size), and the ranks agree on the newest checkpoint that passed everywhere.
//
// With `remote` (s3://bucket/prefix) each checkpoint is also sent to object storage in the
// background (frugal/remote/checkpoint_uploader.hpp) and committed there once every file is
// stored; the end of a fit and a pre-emption wait for that commit (at most
// remote_deadline_seconds) and fail, naming the checkpoint that is only local, when it does not
// come. A start whose local directory lacks a newer checkpoint downloads the newest committed
// remote one that verifies: a fresh machine resumes where the reclaimed one stopped.
//
// It is also the Trainer's resume source: add it with add_checkpointing, which does both.
//
//   frugal::add_checkpointing(trainer, std::make_shared<frugal::CheckpointPolicy>(
//       frugal::CheckpointOptions().every_n_steps(500).keep_last(3).keep_best(1).monitor("loss")));

#include <torch/arg.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "frugal/checkpoint/checkpoint_store.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/core/resume_source.hpp"

namespace frugal {

class Trainer;
struct S3ClientOptions;

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
  TORCH_ARG(std::string, monitor_mode) = "min";  // min | max
  TORCH_ARG(Precision, weights_dtype) = Precision::fp32;
  /// Checkpoints beyond retention, or older than archive_after_days, move here instead of being
  /// deleted ("" = delete); the best ones stay in place.
  TORCH_ARG(std::string, archive_dir) = "";
  TORCH_ARG(double, archive_after_days) = 0;  // 0 = only by retention
  TORCH_ARG(bool, async) = true;
  TORCH_ARG(bool, resume) = true;           // continue from the newest valid checkpoint
  TORCH_ARG(bool, on_signal) = true;        // SIGTERM/SIGUSR1: checkpoint and stop
  /// s3://bucket/prefix: also keep checkpoints in object storage ("" = local only). Credentials
  /// from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN.
  TORCH_ARG(std::string, remote) = "";
  /// The store's scheme://host[:port]; "" = AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS S3.
  TORCH_ARG(std::string, remote_endpoint) = "";
  TORCH_ARG(std::string, remote_region) = "";          // "" = AWS_REGION, AWS_DEFAULT_REGION, us-east-1
  TORCH_ARG(std::string, remote_addressing) = "auto";  // auto | path | virtual
  /// How long a pre-emption or the end of a fit waits for the checkpoint's remote commit.
  TORCH_ARG(double, remote_deadline_seconds) = 90;
  TORCH_ARG(int64_t, remote_part_mb) = 64;             // multipart part size (S3's minimum: 5)
  TORCH_ARG(int64_t, remote_parallel_parts) = 4;       // parts uploaded at once
  /// The prefix's lease (frugal/remote/prefix_lease.hpp): one run writes a prefix; a lease not
  /// renewed this long is taken over.
  TORCH_ARG(double, remote_lease_seconds) = 60;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

class CheckpointPolicy : public Policy, public ResumeSource {
 public:
  explicit CheckpointPolicy(CheckpointOptions options = {}, std::string config_toml = "");
  ~CheckpointPolicy() override;
  std::string name() const override { return "checkpoint"; }

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
  /// Told each stage of each remote upload ("part", a file's name, "manifest.json", "latest"),
  /// on the upload thread. Set before the fit.
  void set_upload_stage_observer(std::function<void(const std::string& stage, int64_t step)> observer) {
    upload_observer_ = std::move(observer);
  }
  /// The client options `remote_*` describe (before the environment fills the gaps).
  S3ClientOptions remote_client_options() const;

 private:
  void surface_errors();
  /// Connects to the remote store (every rank: bad credentials fail everywhere before training),
  /// and on rank 0 tidies it and downloads a remote checkpoint newer than any local one.
  void open_remote(const TrainingRun& run);
  /// Rank 0 downloads the newest committed remote checkpoint newer than every local one that
  /// verifies; returns the reasons of those skipped.
  std::vector<std::string> fetch_newer_remote();
  /// Waits (at most remote_deadline_seconds from `since`) for the newest submitted checkpoint's
  /// remote commit; "" when committed (or nothing to wait for), else why not. Agreed by all ranks.
  std::string wait_remote_commit(std::chrono::steady_clock::time_point since);
  /// Sharded runs: once every rank has uploaded its files of the newest sharded checkpoint, rank
  /// 0 commits it; `block` waits for the uploads (until `deadline`). "" or why it was not
  /// committed. Every rank calls it at the same points: it runs collectives.
  std::string advance_remote_commit(bool block, std::chrono::steady_clock::time_point deadline);
  void submit_upload(const CheckpointInfo& info);
  /// The uploader stops and the prefix's lease is released (after the final commit).
  void close_remote();
  /// Rank 0: <run_dir>/PREEMPTED (JSON: step, signal, checkpoint), for a scheduler script to
  /// tell a pre-emption (resume me) from a failure; removed when the next fit starts.
  void write_preempted_marker(int64_t step, const char* by, const std::string& remote_failure) const;
  /// Logs and records a candidate that cannot be resumed from; `damaged`: moves it aside.
  void skipped(const CheckpointInfo& candidate, const std::string& reason, bool damaged);
  CheckpointWriteOptions write_options(int64_t step) const;
  void save_sharded(const TrainerState& state);
  /// With a sharded write in flight: publishes it once every rank's shard is durable (`block`:
  /// waits for this rank's). Every rank calls it at the same points: it runs collectives.
  void finish_sharded(bool block);

  struct ShardWrite {
    int64_t step = 0;
    std::shared_ptr<TrainingSnapshot> snapshot;
    std::future<std::vector<FileRecord>> files;
  };
  std::optional<ShardWrite> shard_write_;
  CheckpointOptions options_;
  std::string config_toml_;
  CheckpointStore store_;
  const TrainingRun* run_ = nullptr;
  std::future<CheckpointInfo> pending_;
  int64_t last_saved_step_ = -1;
  struct Resume {  // where the search for a checkpoint to resume from is
    std::vector<CheckpointInfo> candidates;  // newest first
    size_t next = 0;
    std::vector<std::string> failures;  // "<dir>: <reason>" of each one skipped
  };
  std::optional<Resume> resume_;
  std::chrono::steady_clock::time_point last_save_time_;
  std::function<void(const std::string&, int64_t)> stage_observer_;
  std::function<void(const std::string&, int64_t)> upload_observer_;
  struct Remote;  // the store, this rank's uploader, and what is uploaded and committed (checkpoint_policy.cpp)
  std::unique_ptr<Remote> remote_;
};

/// Adds `checkpointing` to `trainer` as a policy and as its resume source.
void add_checkpointing(Trainer& trainer, std::shared_ptr<CheckpointPolicy> checkpointing);

}  // namespace frugal
