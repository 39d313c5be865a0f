#pragma once
// Where a checkpoint goes once CheckpointPolicy has written it into the local directory. The
// policy decides when to checkpoint and what goes in; each destination decides where the
// checkpoint also lives, when it counts as committed there, whether a newer one waits there at a
// resume, and what it keeps. The local directory is one destination (local_destination.hpp),
// object storage another (frugal/checkpoint/remote_destination.hpp); a parallel file system or another
// cloud API is a new class, added with CheckpointPolicy::add_destination, not a branch in the policy.
//
// Every rank calls each hook at the same point (a destination may run collectives there), on
// the training thread, unless its comment says otherwise.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "frugal/checkpoint/checkpoint_store.hpp"

namespace frugal {

class TrainingRun;

class CheckpointDestination {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~CheckpointDestination() = default;

  /// For logs and the PREEMPTED marker's keys (<name>_checkpoint, <name>_committed, <name>_error).
  virtual std::string name() const = 0;
  /// Where its checkpoints are, for messages ("s3://bucket/prefix", a directory).
  virtual std::string where() const = 0;
  /// Whether it holds checkpoints beyond the local directory (and so needs a commit that a
  /// pre-emption and the end of a fit wait for).
  virtual bool off_machine() const { return false; }
  /// Where the checkpoint folder `name` is once committed here.
  virtual std::string location_of(const std::string& name) const = 0;

  /// The fit begins, before its resume: connect, take ownership, tidy. `local` is the policy's
  /// store for this run (it outlives the fit).
  virtual void open(const TrainingRun& run, const CheckpointStore& local) = 0;
  /// Before the local checkpoints are searched: brings a checkpoint newer than every local one
  /// into the local directory. "<where>: <reason>" for each one that could not be used.
  virtual std::vector<std::string> fetch_newer() { return {}; }
  /// The run resumes from the local checkpoint `info` (rank 0).
  virtual void resumed_from(const CheckpointInfo& /*info*/) {}

  /// Rank 0, on the writer thread: an unsharded checkpoint is published locally; retention has
  /// not run yet (its folder is still there).
  virtual void published(const CheckpointInfo& /*info*/) {}
  /// Sharded: this rank wrote `files` of `step` into the unpublished `folder`, which rank 0 renames
  /// next. Only on ranks whose write succeeded.
  virtual void shard_written(int64_t /*step*/, const std::filesystem::path& /*folder*/, const std::vector<FileRecord>& /*files*/) {}
  /// Sharded: the checkpoint of `step` is published (`info` on rank 0, nullptr elsewhere).
  virtual void shards_published(int64_t /*step*/, const CheckpointInfo* /*info*/) {}
  /// At each optimizer step's boundary: progress that needs every rank.
  virtual void at_boundary() {}
  /// A pre-emption: the checkpoint of `step` is the only one that matters now.
  virtual void preempted(int64_t /*step*/) {}
  /// Waits for the newest checkpoint's commit here, at most this destination's deadline from
  /// `since`: "" once committed (or nothing to wait for), else why not. Agreed by every rank.
  virtual std::string wait_committed(Clock::time_point /*since*/) { return ""; }
  /// Rank 0, after each save: removes (or archives) what the retention rule does not keep, now
  /// or once the checkpoint is committed.
  virtual void apply_retention() const {}
  /// The fit is over (after the final wait): connections close, ownership is released.
  virtual void close() {}

  /// Told each stage of its own work (an upload's "part", each file, "manifest.json", "latest")
  /// with the step, on whatever thread does it: crash tests stop there. Set before the fit.
  virtual void set_stage_observer(std::function<void(const std::string& stage, int64_t step)> /*observer*/) {}
};

}  // namespace frugal
