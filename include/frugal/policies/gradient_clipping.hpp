#pragma once
// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_) or by value
// (clip_grad_value_). It hooks clip_gradients, which the Trainer calls on boundaries only, after
// gradient reduction and after the loss scale was removed, and never on a skipped step; so it
// always clips true gradients. The total norm stays on the device and is recorded as
// `grad_norm` at each log line.
//
//   trainer.add_policy(std::make_shared<frugal::GradientClippingPolicy>(
//       frugal::GradientClippingOptions().mode(frugal::ClipMode::norm).max_norm(1.0)));

#include <torch/arg.h>

#include <string>

#include "frugal/base/enum_names.hpp"
#include "frugal/core/policy.hpp"

namespace frugal {

enum class ClipMode { off, norm, value };
constexpr std::array<EnumName<ClipMode>, 3> names_of(ClipMode) {
  return {{{ClipMode::off, "off"}, {ClipMode::norm, "norm"}, {ClipMode::value, "value"}}};
}

struct GradientClippingOptions {
  TORCH_ARG(ClipMode, mode) = ClipMode::off;
  TORCH_ARG(double, max_norm) = 1.0;
  /// p of the p-norm; inf for the max norm.
  TORCH_ARG(double, norm_type) = 2.0;
  TORCH_ARG(double, max_value) = 1.0;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

class GradientClippingPolicy : public Policy {
 public:
  explicit GradientClippingPolicy(GradientClippingOptions options = {});
  std::string name() const override { return "gradient_clipping"; }
  PolicyPhase phase() const override { return PolicyPhase::gradients; }
  void clip_gradients(StepContext& ctx) override;
  void collect_metrics(Metrics& metrics) override;

  /// Total norm of the gradients before clipping, at the last clipped step (undefined before).
  const torch::Tensor& last_total_norm() const { return last_total_norm_; }

 private:
  GradientClippingOptions options_;
  torch::Tensor last_total_norm_;
};

/// Clips the gradients of `params` in place to a total `norm_type`-norm of at most `max_norm`,
/// with clip_grad_norm_'s arithmetic, and returns the total norm before clipping (no host sync).
/// With `ctx` whose gradients are sharded, the norm is that of every rank's gradients together
/// (the p-th powers of the ranks' norms summed, or their maximum for the max norm).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm, double norm_type,
                             const StepContext* ctx = nullptr);

}  // namespace frugal
