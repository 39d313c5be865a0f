#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "distributed/c10d_backends.hpp"

namespace frugal::detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, const World& world,
                                                    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(world.rank),
                                                     static_cast<int>(world.world_size), options);
}

}  // namespace frugal::detail
