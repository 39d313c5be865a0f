#include "distributed/c10d_backends.hpp"

#include <cstdlib>

#ifdef FRUGAL_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace frugal::detail {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, const World& world,
                                                    std::chrono::milliseconds timeout) {
#ifdef FRUGAL_HAVE_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // Like torch.distributed: GLOO_SOCKET_IFNAME picks the network interface, else the host's address.
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  options->devices.push_back(ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                    : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(world.rank),
                                                     static_cast<int>(world.world_size), options);
#else
  (void)store, (void)world, (void)timeout;
  throw CommunicationError("Frugal was built without gloo's headers: install libgloo-dev and rebuild for the gloo backend");
#endif
}

}  // namespace frugal::detail
