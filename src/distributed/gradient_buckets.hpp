#pragma once
// Gradients averaged across ranks in buckets (bucket_layout.hpp), each launched from a hook on
// the parameter's gradient accumulator (the autograd node that adds into .grad, as c10d's
// Reducer does) once all of its gradients are final, so the communication overlaps the rest of
// backward.
//   arm()    before a backward whose gradients must be reduced (a boundary micro-step)
//   finish() after it: launches what the hooks did not (unused parameters: zeros) and waits
// Buckets are launched strictly in bucket order: every rank must start the same collectives in
// the same order. What finish() leaves, by reduction:
//   into_grads  all-reduce; the mean back in each parameter's .grad (plain data parallelism)
//   in_buckets  all-reduce; the mean stays in the (padded) bucket, reduced(b); .grad is released
//               once copied into its bucket (sharded optimizer: each rank reads its chunk)
//   scattered   reduce-scatter; this rank's chunk of the mean in reduced(b); the buckets
//               themselves live only from the first gradient to the end of the reduction, and
//               .grad is released once copied (sharded gradients)

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "distributed/detail/bucket_layout.hpp"
#include "frugal/base/communicator.hpp"

namespace torch::autograd {
struct Node;
}

namespace frugal::detail {

enum class BucketReduction { into_grads, in_buckets, scattered };

class GradientBuckets {
 public:
  GradientBuckets(std::vector<torch::Tensor> params, int64_t cap_bytes, Communicator& communicator, bool overlap,
                  BucketReduction reduction = BucketReduction::into_grads, int64_t alignment = 1);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  void arm();
  void finish();
  int64_t size() const { return static_cast<int64_t>(layout_.size()); }
  const std::vector<Bucket>& layout() const { return layout_; }
  /// After finish(): bucket b's mean, whole (in_buckets) or this rank's chunk (scattered).
  const torch::Tensor& reduced(size_t b) const;
  /// Gradient storage held between steps (the persistent buckets or chunks), for memory reports.
  std::vector<torch::Tensor> held() const;

 private:
  struct Slot {
    size_t bucket;
    int64_t offset;
    bool ready = false;
  };
  struct State {
    torch::Tensor flat;    // the bucket's gradients end to end (padded when sharded)
    torch::Tensor chunk;   // scattered: this rank's share of the mean
    size_t waiting = 0;    // gradients not ready yet
    std::unique_ptr<PendingCollective> pending;
  };
  void on_gradient_ready(size_t param);
  void copy_in(size_t param);
  void another_part(size_t param);
  void launch_ready_in_order();
  void launch(size_t bucket);
  torch::Tensor& flat_of(size_t bucket);

  std::vector<torch::Tensor> params_;
  std::vector<Bucket> layout_;
  std::vector<Slot> slots_;
  std::vector<State> states_;
  Communicator& communicator_;
  bool overlap_;
  BucketReduction reduction_;
  bool armed_ = false;
  size_t next_to_launch_ = 0;
  std::mutex mutex_;  // hooks run on autograd's threads
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace frugal::detail
