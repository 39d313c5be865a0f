#pragma once
// The Trainer's counters, visible read-only to policies and callers. Every field here is
// restored on resume (the checkpoint issue saves it), so policies may base decisions on it.

#include <cstdint>
#include <optional>
#include <string>

#include "frugal/base/metrics.hpp"

namespace frugal {

struct TrainerState {
  int64_t epoch = 0;              // current epoch, from 0
  int64_t micro_step = 0;         // forward/backward passes run, over the whole fit
  int64_t step = 0;               // optimizer-step boundaries reached (taken or skipped)
  int64_t skipped_steps = 0;      // boundaries whose optimizer step a policy cancelled
  int64_t samples_seen = 0;       // training examples consumed by this process
  double lr = 0.0;                // learning rate of the first parameter group, now
  Metrics last_validation;        // metrics of the latest validation
  std::optional<std::string> stop_reason;  // set when a policy or a limit ended the fit

  int64_t optimizer_steps() const { return step - skipped_steps; }
};

}  // namespace frugal
