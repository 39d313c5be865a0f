#pragma once
// An optimizer's groups, options and step counts copied now, as a stand-alone optimizer that can
// be serialized later on another thread; its state tensors alias the original's and are listed
// in `deferred`, for a staged snapshot to copy before the original next changes them.
// Known types: SGD, Adam, AdamW. Others return nullptr (the caller serializes them at once).

#include <torch/optim.h>

#include <memory>
#include <vector>

namespace frugal::detail {

std::unique_ptr<torch::optim::Optimizer> staged_copy_of_optimizer(torch::optim::Optimizer& optimizer,
                                                                  std::vector<torch::Tensor*>& deferred);

}  // namespace frugal::detail
