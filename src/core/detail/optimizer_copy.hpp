#pragma once
// A deep copy of an optimizer's state in host memory, as a stand-alone optimizer that can be
// serialized later on another thread while the original keeps updating its state in place.
// Known types: SGD, Adam, AdamW. Others return nullptr (the caller serializes them at once).
// With `deferred`, the state tensors are aliases of the original's, listed there to be copied
// later (a staged snapshot, before the original next changes).

#include <torch/optim.h>

#include <memory>
#include <vector>

namespace frugal::detail {

std::unique_ptr<torch::optim::Optimizer> host_copy_of_optimizer(torch::optim::Optimizer& optimizer,
                                                                std::vector<torch::Tensor*>* deferred = nullptr);

}  // namespace frugal::detail
