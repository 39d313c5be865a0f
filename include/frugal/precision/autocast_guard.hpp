#pragma once
// Turns autocast on for one device type for the lifetime of the guard, through ATen's
// device-generic API, and restores the previous state on exit (clearing the cast cache when
// the outermost guard closes), as Python's torch.autocast context manager does.
//
//   {
//     frugal::AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
//     auto y = model->forward(x);   // matmuls run in bf16
//   }                               // previous autocast state back, cast cache cleared

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace frugal {

class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool previous_enabled_;
  c10::ScalarType previous_dtype_;
};

}  // namespace frugal
