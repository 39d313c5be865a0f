#pragma once
// A snapshot taken in two halves, so that the training thread does not copy the weights and the
// optimizer's state itself. Staging (on the training thread) takes the small parts (buffers,
// policies' state, RNG, counters) at once and only aliases the large tensors; finish() (on the
// thread that writes the checkpoint) copies those to host memory. The training run waits at its
// fence for every staged copy before anything changes the aliased tensors (the next step's
// gradient reduction and optimizer step, a restore, the end of the fit), so the copy overlaps the
// next forward and backward instead of stalling the step.
//
// Device tensors are copied on a side stream after the work queued before staging: the copy
// does not wait for the next step's kernels, and those run beside it.

#include <torch/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "frugal/base/snapshot.hpp"

namespace frugal {

/// Counts the staged copies not finished yet; the training run waits on it before changing
/// weights or optimizer state.
class SnapshotCopyFence {
 public:
  void begin();
  void end();
  /// Blocks until no staged copy is pending; returns the seconds it waited.
  double wait();
  /// The seconds wait() has blocked in all.
  double waited_seconds() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  int64_t pending_ = 0;
  double waited_ = 0;
};

class StagedSnapshot {
 public:
  /// `snapshot`'s tensors at `deferred` still alias the run's own; `fence` counts this copy until
  /// it is finished or dropped. Called on the training thread (it marks the device's queue).
  StagedSnapshot(std::shared_ptr<TrainingSnapshot> snapshot, std::vector<torch::Tensor*> deferred,
                 std::shared_ptr<SnapshotCopyFence> fence);
  StagedSnapshot(const StagedSnapshot&) = delete;
  StagedSnapshot& operator=(const StagedSnapshot&) = delete;
  /// Dropped unfinished: the fence is released and nothing is copied.
  ~StagedSnapshot();

  /// Copies the aliased tensors to host memory, releases the fence, and returns the whole
  /// snapshot; later calls return it again.
  std::shared_ptr<TrainingSnapshot> finish();

 private:
  void release() noexcept;

  std::mutex mutex_;
  std::shared_ptr<TrainingSnapshot> snapshot_;
  std::vector<torch::Tensor*> deferred_;
  std::shared_ptr<SnapshotCopyFence> fence_;
  std::shared_ptr<void> device_mark_;  // a CUDA event recorded at staging (no CUDA type in this header)
  c10::DeviceIndex device_index_ = -1;
  bool finished_ = false;
};

}  // namespace frugal
