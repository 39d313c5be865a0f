#pragma once
// A directory of checkpoints that is always either the old state or the new one. Each
// checkpoint is a folder ckpt-<step>/ with state.pt (tensors), optimizer.pt, meta.json
// (counters, metrics, tensor names) and manifest.json (every file's size and CRC-32). A folder is
// written as ckpt-<step>.tmp, every file and the folder fsynced, then renamed; only then is the
// `latest` pointer replaced (written aside, fsynced, renamed). Reading verifies the manifest and
// falls back to the newest checkpoint that verifies, saying which were skipped and why.
//
//   frugal::CheckpointStore store("runs/x/checkpoints");
//   store.write(trainer.snapshot(), {});
//   if (auto found = store.find_latest_valid()) trainer.restore(store.read(found->info));

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "frugal/checkpoint/snapshot.hpp"
#include "frugal/errors.hpp"

namespace frugal {

class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// Storage precision of the model weights in a checkpoint. fp16/bf16 halve the weights' I/O
/// and disk, but a resume from them is not exact (the weights lose precision).
enum class WeightsDtype { fp32, fp16, bf16 };

struct CheckpointWriteOptions {
  WeightsDtype weights_dtype = WeightsDtype::fp32;
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
  std::string verify(const std::filesystem::path& dir) const;
  /// The newest checkpoint that verifies: the one `latest` names first, then the others newest first.
  std::optional<FoundCheckpoint> find_latest_valid() const;
  TrainingSnapshot read(const CheckpointInfo& info) const;
  /// Complete checkpoints (renamed, with meta.json), oldest first; unfinished *.tmp are ignored.
  std::vector<CheckpointInfo> list() const;
  /// The checkpoint `latest` points to, if the pointer exists.
  std::optional<std::filesystem::path> latest() const;
  /// Removes leftovers of interrupted writes (*.tmp).
  void remove_unfinished() const;

 private:
  std::filesystem::path root_;
};

std::string to_string(WeightsDtype dtype);

}  // namespace frugal
