#pragma once
// The c10d process groups, each in a file of its own because each needs headers of its own
// (gloo's from Debian's libgloo-dev, NCCL's from the CUDA toolkit). A backend that was not
// compiled in throws CommunicationError saying what to install.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "frugal/distributed/communicator.hpp"

namespace frugal::detail {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, const World& world,
                                                    std::chrono::milliseconds timeout);
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, const World& world,
                                                    std::chrono::milliseconds timeout);

}  // namespace frugal::detail
