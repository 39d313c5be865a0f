#pragma once
// One training step outside the fit, made as the fit makes its steps: forward and loss (inside a
// scope such as autocast), backward, optimizer step. The automatic batch size (is this batch size
// out of memory?) and the smoke test (does a step run at all, and stay finite?) both probe with it,
// so neither keeps a copy of the step sequence.
//
//   frugal::probe_step(model, *optimizer, batch, {.forward_scope = autocast_for(precision)});

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <array>
#include <functional>
#include <memory>

#include "frugal/base/enum_names.hpp"
#include "frugal/base/forward_guard.hpp"
#include "frugal/core/model.hpp"

namespace frugal {

enum class ProbePhase { forward, backward, optimizer_step };
constexpr std::array<EnumName<ProbePhase>, 3> names_of(ProbePhase) {
  return {{{ProbePhase::forward, "forward"}, {ProbePhase::backward, "backward"}, {ProbePhase::optimizer_step, "optimizer step"}}};
}

struct ProbeStepOptions {
  /// Held open around the forward pass and loss (an autocast guard), or none.
  std::function<std::unique_ptr<ForwardGuard>()> forward_scope;
  /// Called as each phase starts: where a failure happened.
  std::function<void(ProbePhase)> on_phase;
  /// Called after each phase with the step's loss; may throw to stop the probe (a NaN).
  std::function<void(ProbePhase, const torch::Tensor& loss)> after_phase;
};

/// Runs the step; returns its loss. Gradients are cleared before backward and after the step.
torch::Tensor probe_step(const Model& model, torch::optim::Optimizer& optimizer, const Batch& batch,
                         const ProbeStepOptions& options = {});

}  // namespace frugal
