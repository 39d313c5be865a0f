#include "frugal/optim/fused_adamw.hpp"

#include <ATen/ops/_fused_adamw.h>

#include "optim/detail/adam_family.hpp"

namespace frugal {

FusedAdamW::FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups, torch::optim::AdamWOptions defaults,
                       StateQuantization quantization)
    : torch::optim::AdamW(std::move(param_groups), defaults), QuantizedStateOptimizer(quantization) {
  detail::refuse_amsgrad_in_8bit<torch::optim::AdamWOptions>(*this, *this);
}

FusedAdamW::FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults, StateQuantization quantization)
    : FusedAdamW({torch::optim::OptimizerParamGroup(std::move(params))}, defaults, quantization) {}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  detail::adam_family_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      *this, *this, /*decoupled=*/true, [](auto&&... args) { at::_fused_adamw_(args...); });
  return loss;
}

void FusedAdamW::add_param_group(const torch::optim::OptimizerParamGroup& param_group) {
  detail::add_checked_param_group<torch::optim::AdamWOptions>(*this, *this, param_group);
}

void FusedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::optim::AdamW::load(archive);
  detail::refuse_amsgrad_in_8bit<torch::optim::AdamWOptions>(*this, *this, " of the loaded optimizer state");
  detail::adopt_quantized_states(*this, *this, archive, detail::adam_moments(), detail::adam_fp32_form<torch::optim::AdamWParamState>());
}

}  // namespace frugal
