#pragma once
// Which checkpoints a destination keeps: one rule for the local directory and for object storage.
// The newest keep_last (0 = all) stay, and the best keep_best by `monitor` (a validation metric's
// value at the checkpoint's step; checkpoints without a finite value are not ranked).

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frugal/base/monitor_mode.hpp"

namespace frugal {

struct RetentionRule {
  int64_t keep_last = 3;
  int64_t keep_best = 0;
  std::string monitor = "loss";
  MonitorMode mode = MonitorMode::min;
};

struct RetentionCandidate {
  std::string name;             // the checkpoint folder's name
  std::optional<double> score;  // its `monitor` value, if known
};

struct Retained {
  std::set<std::string> newest;  // among the newest keep_last
  std::set<std::string> best;    // among the best keep_best
  bool keeps(const std::string& name) const { return newest.count(name) > 0 || best.count(name) > 0; }
};

/// What `rule` keeps of `candidates`, given oldest first.
Retained retain(const std::vector<RetentionCandidate>& candidates, const RetentionRule& rule);

}  // namespace frugal
