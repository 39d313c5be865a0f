#pragma once
// A batch as the Trainer sees it: the usual input/target pair plus any further named tensors
// (attention masks, token types, span positions...) that a task needs.

#include <torch/types.h>

#include <map>
#include <string>

namespace frugal {

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
  std::map<std::string, torch::Tensor> extra;

  /// Number of examples: the size of the first dimension of `input`.
  int64_t size() const { return input.defined() ? input.size(0) : 0; }

  /// A copy with every tensor on `device`; non_blocking overlaps host-to-device copies of
  /// pinned memory with compute.
  Batch to(const torch::Device& device, bool non_blocking = false) const;
  /// A copy in page-locked host memory (needs CUDA), so to(cuda, non_blocking) is asynchronous.
  Batch pin_memory() const;
};

}  // namespace frugal
