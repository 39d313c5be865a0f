#include "frugal/core/probe_step.hpp"

namespace frugal {

torch::Tensor probe_step(const Model& model, torch::optim::Optimizer& optimizer, const Batch& batch,
                         const ProbeStepOptions& options) {
  auto phase = [&](ProbePhase p) {
    if (options.on_phase) options.on_phase(p);
  };
  auto done = [&](ProbePhase p, const torch::Tensor& loss) {
    if (options.after_phase) options.after_phase(p, loss);
  };
  phase(ProbePhase::forward);
  torch::Tensor loss;
  {
    std::unique_ptr<ForwardGuard> scope = options.forward_scope ? options.forward_scope() : nullptr;
    loss = model.loss(batch);
  }
  done(ProbePhase::forward, loss);
  phase(ProbePhase::backward);
  optimizer.zero_grad(/*set_to_none=*/true);
  loss.backward();
  done(ProbePhase::backward, loss);
  phase(ProbePhase::optimizer_step);
  optimizer.step();
  done(ProbePhase::optimizer_step, loss);
  optimizer.zero_grad(/*set_to_none=*/true);
  return loss;
}

}  // namespace frugal
