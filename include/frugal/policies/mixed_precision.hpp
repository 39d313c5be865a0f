#pragma once
// Mixed precision: the forward pass under autocast (fp16 or bf16), and for fp16 dynamic loss
// scaling with skipped overflow steps. Parameters, gradients and optimizer state stay fp32.
// Hooks: forward_guard (autocast), transform_loss (x scale), unscale_gradients (unscale, inf
// check, cancel on overflow: the one host sync of the step), on_after_optimizer_step (update
// the scale, act on the floor), save/load_state (scale, growth tracker, mode).
//
//   trainer.add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(
//       frugal::MixedPrecisionOptions().mode(frugal::Precision::fp16)));

#include <torch/arg.h>

#include <optional>
#include <string>

#include "frugal/base/enum_names.hpp"
#include "frugal/base/precision.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/precision/grad_scaler.hpp"

namespace frugal {

/// What to do when an fp16 loss scale falls below min_scale (fp16 cannot represent the gradients).
enum class ScaleFloorAction { error, fallback };
constexpr std::array<EnumName<ScaleFloorAction>, 2> names_of(ScaleFloorAction) {
  return {{{ScaleFloorAction::error, "error"}, {ScaleFloorAction::fallback, "fallback"}}};
}

struct MixedPrecisionOptions {
  TORCH_ARG(Precision, mode) = Precision::fp32;
  /// Run the forward pass under autocast. Off: loss scaling only (for models that cast themselves).
  TORCH_ARG(bool, autocast) = true;
  TORCH_ARG(GradScalerOptions, scaler) = {};
  TORCH_ARG(double, min_scale) = 1.0;
  /// error: stop with a clear message; fallback: continue in bf16 where supported, else fp32.
  TORCH_ARG(ScaleFloorAction, on_min_scale) = ScaleFloorAction::error;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

class MixedPrecisionPolicy : public Policy {
 public:
  explicit MixedPrecisionPolicy(MixedPrecisionOptions options = {});
  std::string name() const override { return "mixed_precision"; }
  PolicyPhase phase() const override { return PolicyPhase::precision; }

  void on_fit_begin(const TrainingRun& run) override;
  /// Switches to a precision the run asked for (StepContext::request_precision) and publishes
  /// the one in effect (StepContext::precision).
  void on_step_begin(StepContext& ctx) override;
  std::unique_ptr<ForwardGuard> forward_guard(const TrainerState& state, Phase phase) override;
  torch::Tensor transform_loss(StepContext& ctx, torch::Tensor loss) override;
  void unscale_gradients(StepContext& ctx) override;
  void on_after_optimizer_step(StepContext& ctx) override;
  void collect_metrics(Metrics& metrics) override;
  void save_state(StateDict& state) const override;
  void load_state(const StateDict& state) override;

  /// The precision in effect now (differs from options().mode() after a fallback).
  Precision precision() const { return precision_; }
  /// Continues in `precision` from the next forward pass on (bf16 where unsupported: fp32).
  void switch_to(Precision precision, const std::string& reason);
  const GradScaler& scaler() const { return scaler_; }
  int64_t overflow_steps() const { return overflow_steps_; }

 private:
  void fall_back(double scale);

  MixedPrecisionOptions options_;
  Precision precision_;
  GradScaler scaler_;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool bf16_supported_ = true;
  torch::Tensor found_inf_;  // of the current boundary, consumed by the scale update
  int64_t overflow_steps_ = 0;
};

}  // namespace frugal
