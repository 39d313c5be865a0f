#include "frugal/base/staged_snapshot.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <map>

#include "base/host_memory.hpp"

namespace frugal {

void SnapshotCopyFence::begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++pending_;
}

void SnapshotCopyFence::end() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --pending_;
  }
  idle_.notify_all();
}

double SnapshotCopyFence::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (pending_ == 0) return 0;
  const auto start = std::chrono::steady_clock::now();
  idle_.wait(lock, [this] { return pending_ == 0; });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  waited_ += seconds;
  return seconds;
}

double SnapshotCopyFence::waited_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waited_;
}

namespace {
// One event a device, recorded on its current stream at staging: the copies wait for the work
// queued before it, not for the steps queued after.
using DeviceMarks = std::map<c10::DeviceIndex, at::cuda::CUDAEvent>;
}  // namespace

StagedSnapshot::StagedSnapshot(std::shared_ptr<TrainingSnapshot> snapshot, std::vector<torch::Tensor*> deferred,
                               std::shared_ptr<SnapshotCopyFence> fence)
    : snapshot_(std::move(snapshot)), deferred_(std::move(deferred)), fence_(std::move(fence)) {
  std::shared_ptr<DeviceMarks> marks;
  for (const torch::Tensor* t : deferred_) {
    if (!t->defined() || !t->is_cuda()) continue;
    if (!marks) marks = std::make_shared<DeviceMarks>();
    const c10::DeviceIndex index = t->device().index();
    if (marks->count(index)) continue;
    (*marks)[index].record(c10::cuda::getCurrentCUDAStream(index));
  }
  device_mark_ = marks;
  if (fence_) fence_->begin();
}

StagedSnapshot::~StagedSnapshot() { release(); }

void StagedSnapshot::release() noexcept {
  deferred_.clear();  // never read after the fence is down
  if (fence_) fence_->end();
  fence_.reset();
}

std::shared_ptr<TrainingSnapshot> StagedSnapshot::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return snapshot_;
  if (!fence_) throw std::logic_error("StagedSnapshot::finish after a failed copy: the snapshot is incomplete");
  try {
    torch::NoGradGuard no_grad;
    const auto marks = std::static_pointer_cast<DeviceMarks>(device_mark_);
    for (torch::Tensor* t : deferred_) {
      if (!t->defined() || !t->is_cuda()) *t = detail::host_copy(*t);
    }
    if (marks) {
      for (auto& [index, mark] : *marks) {
        const c10::cuda::CUDAGuard device(index);
        const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
        mark.block(side);
        const c10::cuda::CUDAStreamGuard on_side(side);
        for (torch::Tensor* t : deferred_) {
          if (t->defined() && t->is_cuda() && t->device().index() == index) *t = detail::host_copy(*t);
        }
        side.synchronize();  // the copies are done before the fence lets the step change the tensors
      }
    }
  } catch (...) {
    release();
    throw;
  }
  release();
  finished_ = true;
  return snapshot_;
}

}  // namespace frugal
