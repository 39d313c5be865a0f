#pragma once
// A directory of checkpoints that is always either the old state or the new one. Each
// checkpoint is a folder ckpt-<step>/ with state.pt (tensors), optimizer.pt, meta.json
// (counters, metrics, tensor names) and manifest.json (every file's size and CRC-32). A write:
//   1. every file into ckpt-<step>.tmp/, each fsynced; manifest.json last; the folder fsynced;
//   2. a leftover ckpt-<step>/ of an earlier, unfinished attempt at the same step removed (one that
//      verifies is kept: that step is already saved); ckpt-<step>.tmp renamed to ckpt-<step>; the
//      checkpoint directory fsynced;
//   3. `latest` replaced: the name written to latest.tmp and fsynced, latest.tmp renamed over
//      `latest`, the directory fsynced.
// A kill between any two steps leaves the previous checkpoints and a `latest` that names one of
// them or the new one. Reading tries the checkpoint `latest` names, then the others newest first,
// using the first that verifies and saying which were skipped and why. Retention deletes by
// renaming to ckpt-<step>.deleting first (not a checkpoint name), so a kill midway leaves no
// partial checkpoint; leftovers (*.tmp, *.deleting) are removed when a fit starts.
//
// A sharded checkpoint (a sharded optimizer, one part per rank) has no optimizer.pt: each rank r
// of N writes shard-<r>-of-<N>.weights.pt (its ranges of the trained weights) and
// shard-<r>-of-<N>.optimizer.pt (its optimizer state) into the same .tmp folder, no rank holding
// more than its part; rank 0 writes state.pt (buffers, policies, RNG) and, once every rank's files
// are durable, meta.json (with every rank's ranges), the manifest of all files, the rename and
// `latest`. A shard missing or damaged makes the whole checkpoint invalid.
//
//   frugal::CheckpointStore store("runs/x/checkpoints");
//   store.write(trainer.snapshot(), {});
//   if (auto found = store.find_latest_valid()) trainer.restore(store.read(found->info));

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/base/precision.hpp"
#include "frugal/base/snapshot.hpp"
#include "frugal/errors.hpp"

namespace frugal {

struct CheckpointWriteOptions {
  /// Storage precision of the model weights. fp16/bf16 halve the weights' I/O and disk, but a
  /// resume from them is not exact (the weights lose precision).
  Precision weights_dtype = Precision::fp32;
  std::string config_toml;  // the resolved config, stored beside the state ("" = none)
  /// Called after each stage ("state.pt", "optimizer.pt", "meta.json", "manifest.json",
  /// "renamed", "latest"): progress reporting, and crash tests that stop at a given stage.
  std::function<void(const std::string& stage)> on_stage;
};

struct CheckpointInfo {
  std::filesystem::path dir;
  int64_t step = 0;
  double unix_time = 0.0;      // when it was written
  Metrics metrics;             // the last validation's metrics at that step
  std::string weights_dtype = "fp32";
};

/// A file of a checkpoint as its manifest records it.
struct FileRecord {
  std::string name;
  uint64_t size = 0;
  /// XXH3-64 of the file, computed as it was written (manifests before 2026-12 hold a CRC-32
  /// instead; both are read).
  uint64_t xxh3 = 0;
};

struct FoundCheckpoint {
  CheckpointInfo info;
  std::vector<std::string> skipped;  // "<dir>: <reason>" for each newer one that did not verify
};

class CheckpointStore {
 public:
  explicit CheckpointStore(std::filesystem::path root);
  const std::filesystem::path& root() const { return root_; }

  CheckpointInfo write(const TrainingSnapshot& snapshot, const CheckpointWriteOptions& options) const;
  /// "" when `dir` holds a complete checkpoint whose files match its manifest, else the reason.
  /// `checksum(name)` false skips a file's CRC (its size is still checked): a rank resuming from
  /// a sharded checkpoint reads, and so checks, only the shards it needs.
  std::string verify(const std::filesystem::path& dir,
                     const std::function<bool(const std::string& file)>& checksum = nullptr) const;

  // -- Sharded checkpoints, written by every rank together (CheckpointPolicy runs the steps) --
  /// Rank 0, first: an empty ckpt-<step>.tmp (false: that step is already saved and verifies).
  bool begin_sharded(int64_t step) const;
  /// Every rank, once rank 0 has begun: its shard files (rank 0: also state.pt and the config),
  /// written and fsynced. Returns what the manifest must record of them.
  std::vector<FileRecord> write_shard(const TrainingSnapshot& snapshot, const CheckpointWriteOptions& options) const;
  /// Rank 0, once every rank's files are durable: meta.json, the manifest (`records`: every
  /// rank's files), the rename and `latest`.
  CheckpointInfo finish_sharded(const TrainingSnapshot& snapshot, const std::vector<FileRecord>& records,
                                const CheckpointWriteOptions& options) const;
  /// shard-<rank>-of-<world>.<kind>.pt, kind "weights" or "optimizer".
  static std::string shard_file(int64_t rank, int64_t world_size, const std::string& kind);
  /// The layout of a sharded checkpoint (its meta.json), or nullptr for an unsharded one.
  std::shared_ptr<const ShardingInfo> sharding_of(const CheckpointInfo& info) const;
  /// The newest checkpoint that verifies: the one `latest` names first, then the others newest first.
  std::optional<FoundCheckpoint> find_latest_valid() const;
  TrainingSnapshot read(const CheckpointInfo& info) const;
  /// Complete checkpoints (renamed, with meta.json), oldest first; unfinished *.tmp are ignored.
  std::vector<CheckpointInfo> list() const;
  /// The checkpoint `latest` points to, if the pointer exists and names a checkpoint folder here.
  std::optional<std::filesystem::path> latest() const;
  /// What the `latest` file says, unchecked (for saying why it was ignored).
  std::optional<std::string> latest_name() const;
  /// Renames a checkpoint that failed its check to <dir>.damaged (kept for inspection, no longer
  /// a checkpoint: not listed, not counted by retention); returns the new path.
  std::filesystem::path move_aside(const std::filesystem::path& dir) const;
  /// Folders moved aside by move_aside, oldest name first.
  std::vector<std::filesystem::path> damaged() const;
  /// A complete checkpoint folder from elsewhere (`incoming`, a verified download) becomes the
  /// checkpoint `name` here and `latest` names it; a local folder of that name (one that failed
  /// its check) is moved aside first. Returns its path.
  std::filesystem::path adopt(const std::filesystem::path& incoming, const std::string& name) const;
  /// Removes leftovers of interrupted writes (*.tmp) and deletions (*.deleting).
  void remove_unfinished() const;
  /// Deletes a checkpoint folder so that a kill midway never leaves a partial ckpt-*: renamed to
  /// <dir>.deleting (not a checkpoint name) first, then removed.
  void remove(const std::filesystem::path& dir) const;

 private:
  /// The manifest of `records`, then the rename of `tmp` and the `latest` pointer.
  void publish(const std::filesystem::path& tmp, const std::filesystem::path& final_dir, const std::vector<FileRecord>& records,
               const std::function<void(const char*)>& stage) const;
  /// `latest` replaced, durably, by the name of `dir`.
  void point_latest_at(const std::filesystem::path& dir) const;
  std::filesystem::path root_;
};

}  // namespace frugal
