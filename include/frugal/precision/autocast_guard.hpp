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

#include <memory>

#include "frugal/base/forward_guard.hpp"
#include "frugal/base/precision.hpp"

namespace frugal {

class AutocastGuard : public ForwardGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype);
  ~AutocastGuard() override;
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool previous_enabled_;
  c10::ScalarType previous_dtype_;
};

/// The forward scope of a training precision: autocast to fp16 or bf16 on `device_type`, or none
/// for fp32 or with autocast off (models that cast themselves).
std::unique_ptr<ForwardGuard> autocast_scope(Precision precision, bool autocast, c10::DeviceType device_type);

}  // namespace frugal
