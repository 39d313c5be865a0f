#pragma once
// Batch tensors that a loader reuses instead of allocating each batch: a worker collates its
// samples straight into a buffer (page-locked when batches go to a GPU), and the buffer comes
// back once nothing but the pool holds it and any asynchronous copy out of it has finished. A
// fresh 38 MB batch per step (ResNet-50, batch 256) would otherwise be faulted in page by page, or
// pinned through the caching host allocator's lock, every time.
//
//   torch::Tensor out = buffers.acquire({256, 3, 224, 224}, {150528, 1, 672, 3}, torch::kUInt8, pinned);
//   ... fill out[i] ...; after an async copy from it: buffers.hold_until(out, [event] { return event->query(); });

#include <torch/types.h>

#include <functional>
#include <mutex>
#include <vector>

namespace frugal::detail {

class BatchBuffers {
 public:
  /// At most `capacity` buffers are kept; past that, acquire() allocates without keeping.
  explicit BatchBuffers(size_t capacity = 64) : capacity_(capacity) {}

  /// An uninitialised host tensor of `sizes`, `strides` and `dtype`, reused when a kept one of the
  /// same kind is free; `pinned` (needs CUDA) gives page-locked memory.
  torch::Tensor acquire(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype, bool pinned);
  /// `buffer` (from acquire) is not handed out again before `done()` returns true.
  void hold_until(const torch::Tensor& buffer, std::function<bool()> done);
  /// Buffers kept (free or in use).
  size_t size() const;

 private:
  struct Entry {
    torch::Tensor tensor;
    bool pinned = false;
    std::function<bool()> done;  // null: free once unreferenced
    bool free();
  };
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  size_t capacity_;
};

/// Stacks `parts` (equal shapes and dtypes) into one tensor [N, ...], copying each straight into
/// a buffer from `buffers` (null: a fresh tensor). Each slot has the layout of the parts (a CHW
/// view of HWC memory gives a channels-last batch), so the copies are straight memory copies.
torch::Tensor stack_into(const std::vector<torch::Tensor>& parts, BatchBuffers* buffers, bool pinned);

}  // namespace frugal::detail
