#include "frugal/optim/fused_adam.hpp"

#include <ATen/ops/_fused_adam.h>

#include "optim/detail/adam_family.hpp"

namespace frugal {

FusedAdam::FusedAdam(std::vector<torch::optim::OptimizerParamGroup> param_groups, torch::optim::AdamOptions defaults,
                     StateQuantization quantization)
    : torch::optim::Adam(std::move(param_groups), defaults), QuantizedStateOptimizer(quantization) {
  detail::refuse_amsgrad_in_8bit<torch::optim::AdamOptions>(*this, *this);
}

FusedAdam::FusedAdam(std::vector<torch::Tensor> params, torch::optim::AdamOptions defaults, StateQuantization quantization)
    : FusedAdam({torch::optim::OptimizerParamGroup(std::move(params))}, defaults, quantization) {}

torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  detail::adam_family_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(
      *this, *this, /*decoupled=*/false, [](auto&&... args) { at::_fused_adam_(args...); });
  return loss;
}

void FusedAdam::add_param_group(const torch::optim::OptimizerParamGroup& param_group) {
  detail::add_checked_param_group<torch::optim::AdamOptions>(*this, *this, param_group);
}

void FusedAdam::load(torch::serialize::InputArchive& archive) {
  torch::optim::Adam::load(archive);
  detail::refuse_amsgrad_in_8bit<torch::optim::AdamOptions>(*this, *this, " of the loaded optimizer state");
  detail::adopt_quantized_states(*this, *this, archive, detail::adam_moments(), detail::adam_fp32_form<torch::optim::AdamParamState>());
}

}  // namespace frugal
