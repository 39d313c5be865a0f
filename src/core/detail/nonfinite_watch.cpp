#include "core/detail/nonfinite_watch.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace frugal::detail {

namespace {
// With the checks far apart (a long log interval, no checkpoints), read every so many steps, so
// the pending scalars stay few: one wait per 1024 steps.
constexpr size_t kReadEvery = 1024;
}  // namespace

void NonFiniteWatch::end_step(int64_t step, bool cancelled, torch::Tensor step_loss) {
  if (!enabled_ || !step_loss.defined() || cancelled || found_) return;
  pending_.emplace_back(step, std::move(step_loss));
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
