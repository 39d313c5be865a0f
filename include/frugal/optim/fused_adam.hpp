#pragma once
// Adam (L2 weight decay added to the gradient, torch::optim::Adam's semantics) as one fused
// kernel per group of parameters (ATen's _fused_adam_), with optional 8-bit moments
// (state_quantization.hpp). State and checkpoints are torch::optim::Adam's for fp32 states.
//
//   frugal::FusedAdam opt(model->parameters(), torch::optim::AdamOptions(1e-3), frugal::StateQuantization().bits(8));

#include <torch/optim/adam.h>

#include <vector>

#include "frugal/optim/state_quantization.hpp"

namespace frugal {

class FusedAdam : public torch::optim::Adam, public QuantizedStateOptimizer {
 public:
  explicit FusedAdam(std::vector<torch::optim::OptimizerParamGroup> param_groups, torch::optim::AdamOptions defaults = {},
                     StateQuantization quantization = {});
  explicit FusedAdam(std::vector<torch::Tensor> params, torch::optim::AdamOptions defaults = {}, StateQuantization quantization = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
  /// torch::optim::Optimizer::add_param_group, refusing options the states cannot honour
  /// (amsgrad with 8-bit states) and leaving the optimizer as it was.
  void add_param_group(const torch::optim::OptimizerParamGroup& param_group);
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace frugal
