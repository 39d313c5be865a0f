#pragma once
// Whether a smaller or a larger value of a monitored metric is better (checkpoint retention,
// early stopping).

#include <array>

#include "frugal/base/enum_names.hpp"

namespace frugal {

enum class MonitorMode { min, max };
constexpr std::array<EnumName<MonitorMode>, 2> names_of(MonitorMode) {
  return {{{MonitorMode::min, "min"}, {MonitorMode::max, "max"}}};
}

/// Whether `a` is better than `b` under `mode`.
inline bool better(MonitorMode mode, double a, double b) { return mode == MonitorMode::min ? a < b : a > b; }

}  // namespace frugal
