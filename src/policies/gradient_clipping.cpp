#include "frugal/policies/gradient_clipping.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cmath>

namespace frugal {

void GradientClippingOptions::validate() const {
  if (!(max_norm() > 0)) throw OptionError("max_norm", c10::str("max_norm must be > 0, got ", max_norm()));
  if (!(norm_type() > 0)) throw OptionError("norm_type", c10::str("norm_type must be > 0 or inf, got ", norm_type()));
  if (!(max_value() > 0)) throw OptionError("max_value", c10::str("max_value must be > 0, got ", max_value()));
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm, double norm_type,
                             const StepContext* ctx) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  const bool sharded = ctx != nullptr && ctx->gradients_sharded();
  if (grads.empty() && !sharded) return torch::zeros({});
  // As torch.nn.utils.clip_grad_norm_: the norm of the per-tensor norms, a clamped coefficient,
  // and a multiply without a data-dependent branch (so no host sync).
  // Like PyTorch, fused _foreach_norm on accelerators and one norm per tensor on the CPU.
  std::vector<torch::Tensor> norms;
  if (grads.empty()) {
  } else if (grads.front().is_cpu()) {
    for (const auto& g : grads) norms.push_back(torch::linalg_vector_norm(g, norm_type, c10::nullopt, false, c10::nullopt));
  } else {
    norms = at::_foreach_norm(grads, norm_type);
  }
  const torch::Device first = grads.empty() ? torch::Device(torch::kCPU) : grads.front().device();
  for (auto& n : norms) n = n.to(first);
  torch::Tensor total = norms.empty() ? torch::zeros({}, torch::TensorOptions(first))
                                      : torch::linalg_vector_norm(torch::stack(norms), norm_type, c10::nullopt, false, c10::nullopt);
  if (sharded) {  // this rank's part of the norm, combined with the others' (every rank takes part)
    if (std::isinf(norm_type)) {
      total = ctx->reduce_over_shards(total, ReduceOp::max);
    } else {
      total = ctx->reduce_over_shards(total.pow(norm_type)).pow(1.0 / norm_type);
    }
  }
  torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  for (auto& g : grads) g.mul_(coef.to(g.device(), g.scalar_type()));
  return total;
}

GradientClippingPolicy::GradientClippingPolicy(GradientClippingOptions options) : options_(std::move(options)) {
  options_.validate();
}

void GradientClippingPolicy::clip_gradients(StepContext& ctx) {
  if (options_.mode() == ClipMode::off) return;
  std::vector<torch::Tensor> params = ctx.parameters();
  if (options_.mode() == ClipMode::norm) {
    last_total_norm_ = clip_grad_norm(params, options_.max_norm(), options_.norm_type(), &ctx);
    ctx.set_gradient_norm(last_total_norm_);  // for others to judge (the recovery ladder), at no cost
  } else {
    for (auto& p : params) {
      if (p.grad().defined()) p.grad().clamp_(-options_.max_value(), options_.max_value());
    }
  }
}

void GradientClippingPolicy::collect_metrics(Metrics& metrics) {
  if (last_total_norm_.defined()) metrics["grad_norm"] = last_total_norm_.item<double>();
}

}  // namespace frugal
