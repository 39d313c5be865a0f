#pragma once
// An embedding lookup whose weight gradient is written into storage kept from the previous step.
// A BERT vocabulary's gradient is 30522 x hidden floats (31 MB at hidden 256), allocated and zeroed
// every backward pass; on the CPU, glibc hands such a block back to the kernel on free, so each
// step paid the page faults of fresh memory again (2% of a small BERT's step). The storage is
// reused only when nothing else holds it (the previous gradient was released, as zero_grad does),
// so a gradient still alive is never overwritten.

#include <torch/types.h>

#include <memory>

namespace frugal::detail {

class GradStorage {
 public:
  /// A zeroed tensor of `sizes`, in the kept storage when it is free and large enough.
  torch::Tensor zeros(at::IntArrayRef sizes, const torch::TensorOptions& options);

 private:
  c10::Storage storage_;
};

/// weight[ids], the gradient of weight summed into `storage`'s tensor (rows at padding_idx stay 0;
/// padding_idx < 0: none).
torch::Tensor reused_grad_embedding(const torch::Tensor& weight, const torch::Tensor& ids, int64_t padding_idx,
                                    const std::shared_ptr<GradStorage>& storage);

}  // namespace frugal::detail
