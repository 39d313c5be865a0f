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

class BatchBuffers;

/// Runs `make` (a dataset's fetch) with the calling worker's side stream current on `device`, so
/// device work the dataset queues (GPU decoding) is ordered before the copy's event, which the
/// consumer waits on.
Batch on_side_stream(const torch::Device& device, const std::function<Batch()>& make);

/// Issues a non-blocking copy of `batch` (pinned) to `device` on the calling thread's side stream.
/// Host buffers of `buffers` in the batch are not reused before the copy has read them.
PreparedBatch copy_to_device_async(const Batch& batch, const torch::Device& device, BatchBuffers* buffers = nullptr);

}  // namespace frugal::detail
