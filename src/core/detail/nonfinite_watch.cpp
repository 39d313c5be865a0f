#include "core/detail/nonfinite_watch.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace frugal::detail {

namespace {
// With the checks far apart (a long log interval, no checkpoints), read every so many steps, so
// the pending scalars stay few: one wait per 1024 steps.
constexpr size_t kReadEvery = 1024;
}  // namespace

void NonFiniteWatch::add_micro_step(const torch::Tensor& loss) {
  if (step_loss_.defined()) {
    step_loss_.add_(loss);
  } else {
    step_loss_ = loss.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
}

void NonFiniteWatch::end_step(int64_t step, bool cancelled) {
  if (!step_loss_.defined()) return;
  if (!cancelled && !found_) pending_.emplace_back(step, std::move(step_loss_));
  step_loss_ = torch::Tensor();
  if (pending_.size() >= kReadEvery) first();
}

std::optional<NonFiniteWatch::Finding> NonFiniteWatch::first() {
  if (!found_ && !pending_.empty()) {
    std::vector<torch::Tensor> losses;
    losses.reserve(pending_.size());
    for (const auto& p : pending_) losses.push_back(p.second);
    const torch::Tensor host = at::stack(losses).cpu();
    const float* value = host.data_ptr<float>();
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (!std::isfinite(value[i])) {
        found_ = Finding{pending_[i].first, value[i]};
        break;
      }
    }
  }
  pending_.clear();
  return found_;
}

}  // namespace frugal::detail
