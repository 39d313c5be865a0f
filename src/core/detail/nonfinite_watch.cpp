#include "core/detail/nonfinite_watch.hpp"

#include <ATen/ATen.h>

namespace frugal::detail {

void NonFiniteWatch::add_micro_step(const torch::Tensor& loss) {
  if (!step_loss_.defined()) {
    const auto on = loss.options().dtype(torch::kFloat);
    step_loss_ = at::zeros({}, on);
    first_step_ = at::full({}, -1, on.dtype(torch::kLong));
    first_loss_ = at::zeros({}, on);
  }
  step_loss_.add_(loss);
}

void NonFiniteWatch::end_step(int64_t step, bool cancelled) {
  if (!step_loss_.defined()) return;
  if (!cancelled) {
    // All on the device: new = this step's loss is not finite and none was seen before.
    const torch::Tensor fresh = step_loss_.isfinite().logical_not_().logical_and_(first_step_.lt(0));
    first_step_.masked_fill_(fresh, step);
    first_loss_.copy_(at::where(fresh, step_loss_, first_loss_));
  }
  step_loss_.zero_();
}

std::optional<NonFiniteWatch::Finding> NonFiniteWatch::first() const {
  if (!first_step_.defined()) return std::nullopt;
  const int64_t step = first_step_.item<int64_t>();
  if (step < 0) return std::nullopt;
  return Finding{step, first_loss_.item<double>()};
}

}  // namespace frugal::detail
