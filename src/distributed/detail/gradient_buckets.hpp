#pragma once
// Gradients averaged across ranks in buckets, each launched from a hook on the parameter's
// gradient accumulator (the autograd node that adds into .grad, as c10d's Reducer does) once all
// of its gradients are final, so the all-reduce overlaps the rest of backward.
//   arm()    before a backward whose gradients must be reduced (a boundary micro-step)
//   finish() after it: launches what the hooks did not (unused parameters: zeros), waits, and
//            writes the averages back into .grad
// Buckets hold parameters in reverse order (roughly the order backward produces gradients),
// split by device, dtype and size, and are launched strictly in bucket order: every rank must
// start the same collectives in the same order.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "frugal/distributed/communicator.hpp"

namespace torch::autograd {
struct Node;
}

namespace frugal::detail {

class GradientBuckets {
 public:
  GradientBuckets(std::vector<torch::Tensor> params, int64_t cap_bytes, Communicator& communicator, bool overlap);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  void arm();
  void finish();
  int64_t size() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Slot {
    size_t bucket;
    int64_t offset;
    bool ready = false;
  };
  struct Bucket {
    std::vector<size_t> params;
    torch::Tensor flat;  // all its gradients, end to end
    size_t waiting = 0;  // gradients not ready yet
    std::unique_ptr<PendingCollective> pending;
  };
  void on_gradient_ready(size_t param);
  void copy_in(size_t param);
  void launch_ready_in_order();
  void launch(Bucket& bucket);

  std::vector<torch::Tensor> params_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  Communicator& communicator_;
  bool overlap_;
  bool armed_ = false;
  size_t next_to_launch_ = 0;
  std::mutex mutex_;  // hooks run on autograd's threads
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace frugal::detail
