#include "frugal/core/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "frugal/errors.hpp"

namespace frugal::lr {

LrSchedule constant() {
  return [](int64_t) { return 1.0; };
}

LrSchedule linear_warmup_decay(int64_t warmup_steps, int64_t total_steps) {
  if (warmup_steps < 0 || total_steps < warmup_steps) {
    throw OptionError("total_steps", "linear_warmup_decay needs 0 <= warmup_steps <= total_steps, got " +
                                         std::to_string(warmup_steps) + " and " + std::to_string(total_steps));
  }
  return [=](int64_t step) {
    if (step < warmup_steps) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
    return std::max(0.0, static_cast<double>(total_steps - step) /
                             static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps)));
  };
}

LrSchedule step_decay(int64_t step_size, double gamma) {
  if (step_size < 1) throw OptionError("step_size", "step_size must be >= 1, got " + std::to_string(step_size));
  return [=](int64_t step) { return std::pow(gamma, static_cast<double>(step / step_size)); };
}

LrSchedule cosine(int64_t warmup_steps, int64_t total_steps, double min_factor) {
  if (warmup_steps < 0 || total_steps <= warmup_steps) {
    throw OptionError("total_steps", "cosine needs 0 <= warmup_steps < total_steps, got " +
                                         std::to_string(warmup_steps) + " and " + std::to_string(total_steps));
  }
  return [=](int64_t step) {
    if (step < warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(warmup_steps + 1);
    const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) /
                                              static_cast<double>(total_steps - warmup_steps));
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  };
}

}  // namespace frugal::lr
