#pragma once
// Whether a device computes in bf16 natively: the CPU (emulated where needed) and CUDA GPUs of
// compute capability 8.0 (Ampere) and newer.

#include <c10/core/Device.h>

namespace frugal::detail {
bool bf16_supported(const c10::Device& device);
}  // namespace frugal::detail
