#include "frugal/policies/mixed_precision.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"
#include "frugal/precision/autocast_guard.hpp"
#include "precision/bf16_support.hpp"

namespace frugal {

void MixedPrecisionOptions::validate() const {
  scaler().validate();
  if (!(min_scale() > 0)) throw OptionError("min_scale", c10::str("min_scale must be > 0, got ", min_scale()));
  if (min_scale() > scaler().init_scale()) {
    throw OptionError("min_scale", c10::str("min_scale (", min_scale(), ") must not exceed init_scale (",
                                            scaler().init_scale(), ")"));
  }
}

MixedPrecisionPolicy::MixedPrecisionPolicy(MixedPrecisionOptions options)
    : options_(std::move(options)), precision_(options_.mode()), scaler_(options_.scaler()) {
  options_.validate();
}

void MixedPrecisionPolicy::on_fit_begin(const TrainingRun& run) {
  device_type_ = run.device().type();
  bf16_supported_ = detail::bf16_supported(run.device());
  if (precision_ == Precision::bf16 && !bf16_supported_) {
    throw OptionError("mode", c10::str("precision bf16 is not supported on ", run.device(),
                                       " (needs compute capability 8.0+); use fp16 or fp32"));
  }
  if (precision_ != Precision::fp32) {
    log::info(c10::str("mixed precision: ", to_string(precision_), options_.autocast() ? " autocast" : " (no autocast)",
                       precision_ == Precision::fp16 ? c10::str(", loss scale from ", scaler_.scale_value()) : ""));
  }
}

void MixedPrecisionPolicy::on_step_begin(StepContext& ctx) {
  // A standing request holds also after a rollback restored this policy's older state.
  if (const auto& asked = ctx.standing().precision; asked && *asked != precision_) switch_to(*asked, ctx.standing().precision_reason);
  ctx.set_precision(precision_);
}

std::unique_ptr<ForwardGuard> MixedPrecisionPolicy::forward_guard(const TrainerState&, Phase) {
  return autocast_scope(precision_, options_.autocast(), device_type_);
}

torch::Tensor MixedPrecisionPolicy::transform_loss(StepContext&, torch::Tensor loss) {
  if (precision_ != Precision::fp16) return loss;
  // The loss is scaled in fp32 (autocast returns fp32 losses for fp32 reductions; force it).
  return scaler_.scale(loss.to(torch::kFloat));
}

void MixedPrecisionPolicy::unscale_gradients(StepContext& ctx) {
  found_inf_ = torch::Tensor();
  if (precision_ != Precision::fp16) return;
  found_inf_ = scaler_.unscale(ctx.parameters());
  // With sharded gradients each rank checked its part: an overflow anywhere skips the step everywhere.
  if (ctx.gradients_sharded()) found_inf_ = ctx.reduce_over_shards(found_inf_);
  // The one host sync of an fp16 step: the step must be taken or skipped on the host.
  if (found_inf_.item<float>() != 0.0f) {
    ++overflow_steps_;
    ctx.cancel_step(c10::str("inf/nan gradients at loss scale ", scaler_.scale_value()));
  }
}

void MixedPrecisionPolicy::on_after_optimizer_step(StepContext& ctx) {
  if (precision_ != Precision::fp16 || !found_inf_.defined()) return;
  scaler_.update(found_inf_);
  if (!ctx.step_cancelled()) return;  // the scale only falls after an overflow: check only then
  const double scale = scaler_.scale_value();
  if (scale >= options_.min_scale()) return;
  if (options_.on_min_scale() == ScaleFloorAction::error) {
    throw TrainingError(c10::str("fp16 loss scale fell to ", scale, " (below precision.min_scale=", options_.min_scale(),
                                 ") after ", overflow_steps_, " overflow steps: gradients overflow fp16 even "
                                 "unscaled. Use bf16, or precision.on_min_scale=fallback"));
  }
  fall_back(scale);
}

void MixedPrecisionPolicy::fall_back(double scale) {
  precision_ = bf16_supported_ ? Precision::bf16 : Precision::fp32;
  log::warn(c10::str("fp16 loss scale fell to ", scale, " (below precision.min_scale=", options_.min_scale(),
                     "): falling back to ", to_string(precision_), " for the rest of the run"));
}

void MixedPrecisionPolicy::switch_to(Precision precision, const std::string& reason) {
  if (precision == Precision::bf16 && !bf16_supported_) precision = Precision::fp32;
  if (precision == precision_) return;
  log::warn(c10::str("precision: ", to_string(precision_), " -> ", to_string(precision), " (", reason, ")"));
  precision_ = precision;
  found_inf_ = torch::Tensor();
}

void MixedPrecisionPolicy::collect_metrics(Metrics& metrics) {
  if (options_.mode() == Precision::fp32) return;
  if (precision_ == Precision::fp16) metrics["loss_scale"] = scaler_.scale_value();
  metrics["overflow_steps"] = static_cast<double>(overflow_steps_);
  metrics["precision_fallback"] = precision_ != options_.mode() ? 1.0 : 0.0;
}

void MixedPrecisionPolicy::save_state(StateDict& state) const {
  scaler_.save_state(state, "scaler.");
  state["precision"] = torch::tensor(static_cast<int64_t>(precision_));
  state["overflow_steps"] = torch::tensor(overflow_steps_);
}

void MixedPrecisionPolicy::load_state(const StateDict& state) {
  scaler_.load_state(state, "scaler.");
  if (auto it = state.find("precision"); it != state.end()) precision_ = static_cast<Precision>(it->second.item<int64_t>());
  if (auto it = state.find("overflow_steps"); it != state.end()) overflow_steps_ = it->second.item<int64_t>();
}

}  // namespace frugal
