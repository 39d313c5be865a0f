#include "frugal/precision/autocast_guard.hpp"

#include <ATen/autocast_mode.h>

namespace frugal {

AutocastGuard::AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype)
    : device_type_(device_type),
      previous_enabled_(at::autocast::is_autocast_enabled(device_type)),
      previous_dtype_(at::autocast::get_autocast_dtype(device_type)) {
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // Casts of weights are cached for the duration of the outermost region only: the weights
  // change after the optimizer step.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

std::unique_ptr<ForwardGuard> autocast_scope(Precision precision, bool autocast, c10::DeviceType device_type) {
  if (precision == Precision::fp32 || !autocast) return nullptr;
  return std::make_unique<AutocastGuard>(device_type, scalar_type_of(precision));
}

}  // namespace frugal
