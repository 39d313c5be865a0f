#pragma once
// Object storage as a checkpoint destination. Each checkpoint also goes to s3://bucket/prefix in
// the background (checkpoint_uploader.hpp) and is committed there once every file is stored; the
// end of a fit and a pre-emption wait for that commit (at most RemoteOptions::deadline_seconds)
// and fail, naming the checkpoint that is only local, when it does not come. A start whose local
// directory lacks a newer checkpoint downloads the newest committed remote one that verifies: a
// fresh machine resumes where the reclaimed one stopped. Rank 0 holds the prefix's lease
// (prefix_lease.hpp) for the whole fit.
//
// Sharded runs: every rank uploads its own shard files; once all have, rank 0 commits the
// manifest.

#include <atomic>
#include <memory>
#include <optional>

#include "frugal/checkpoint/checkpoint_destination.hpp"
#include "frugal/base/retention.hpp"
#include "frugal/remote/remote_options.hpp"

namespace frugal {

class CheckpointUploader;
class PrefixLease;
class RemoteCheckpoints;

class RemoteDestination : public CheckpointDestination {
 public:
  RemoteDestination(RemoteOptions options, RetentionRule retention);
  ~RemoteDestination() override;
  std::string name() const override { return "remote"; }
  std::string where() const override { return options_.url(); }
  bool off_machine() const override { return true; }
  std::string location_of(const std::string& name) const override;

  /// Connects (every rank: bad credentials fail everywhere before training); rank 0 takes the
  /// prefix's lease and removes what a killed run left unfinished.
  void open(const TrainingRun& run, const CheckpointStore& local) override;
  /// Rank 0 downloads the newest committed remote checkpoint newer than every local one that
  /// verifies; every rank learns the outcome.
  std::vector<std::string> fetch_newer() override;
  /// A local checkpoint the store lacks (its upload was cut off) goes up now.
  void resumed_from(const CheckpointInfo& info) override;
  void published(const CheckpointInfo& info) override;
  void shard_written(int64_t step, const std::filesystem::path& folder, const std::vector<FileRecord>& files) override;
  void shards_published(int64_t step, const CheckpointInfo* info) override;
  void at_boundary() override { advance_sharded_commit(/*block=*/false, {}); }
  void preempted(int64_t step) override;
  std::string wait_committed(Clock::time_point since) override;
  /// The uploader stops and the prefix's lease is released (after the final commit).
  void close() override;
  void set_stage_observer(std::function<void(const std::string& stage, int64_t step)> observer) override {
    observer_ = std::move(observer);
  }

 private:
  /// Rank 0's download; the reasons of those skipped.
  std::vector<std::string> fetch_newer_on_rank0();
  /// Sharded: once every rank has uploaded its files of the newest sharded checkpoint, rank 0
  /// commits it; `block` waits for the uploads (until `deadline`). "" or why it was not committed.
  std::string advance_sharded_commit(bool block, Clock::time_point deadline);

  RemoteOptions options_;
  RetentionRule retention_;
  std::function<void(const std::string&, int64_t)> observer_;
  const TrainingRun* run_ = nullptr;
  const CheckpointStore* local_ = nullptr;
  bool sharded_ = false;
  std::shared_ptr<RemoteCheckpoints> store_;
  /// Rank 0's hold on the prefix (released after the uploader stops: declared before it).
  std::shared_ptr<PrefixLease> lease_;
  /// Rank 0's (it uploads unsharded checkpoints and commits); with a sharded optimizer every
  /// rank has one for its own shard files.
  std::unique_ptr<CheckpointUploader> uploader_;
  int64_t newest_at_start_ = -1;             // the newest committed remote step when the fit began
  std::atomic<int64_t> last_submitted_{-1};  // unsharded: the newest checkpoint handed to the uploader
  std::optional<int64_t> sharded_step_;      // sharded: the newest checkpoint being uploaded by every rank
  std::vector<std::string> staged_;          // sharded: this rank's staged files of it
  int64_t last_commit_submitted_ = -1;       // sharded, rank 0: the newest commit handed to the uploader
  int64_t commit_awaited_ = -1;              // the newest step whose commit a wait saw (not waited for again)
};

}  // namespace frugal
