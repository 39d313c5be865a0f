#include "bf16_support.hpp"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>

namespace frugal::detail {

bool bf16_supported(const c10::Device& device) {
  if (device.is_cpu()) return true;
  if (!device.is_cuda() || !at::hasCUDA()) return false;
  const auto index = device.has_index() ? device.index() : at::cuda::current_device();
  return at::cuda::getDeviceProperties(index)->major >= 8;
}

}  // namespace frugal::detail
