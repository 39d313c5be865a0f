#pragma once
// Copies a batch to a CUDA device from a loader worker, on a side stream of that worker's own,
// so the copy of the next batches runs while the current step computes on the main stream.

#include <torch/types.h>

#include <functional>

#include "frugal/data/batch.hpp"

namespace frugal::detail {

/// A batch and what the consumer must do before using it (nothing on the CPU).
struct PreparedBatch {
  Batch batch;
  /// Run on the consumer's thread: orders the consumer's current stream after the copy (no host
  /// wait) and ties the batch's memory to that stream, so the allocator cannot reuse it early.
  std::function<void()> before_use;
};

/// Issues a non-blocking copy of `batch` (pinned) to `device` on the calling thread's side stream.
PreparedBatch copy_to_device_async(const Batch& batch, const torch::Device& device);

}  // namespace frugal::detail
