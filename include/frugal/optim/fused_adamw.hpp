#pragma once
// AdamW whose step is one fused kernel per group of parameters (ATen's _fused_adamw_, what
// torch.optim.AdamW(fused=True) and Hugging Face's Trainer use by default): one pass over each
// parameter, gradient and moment instead of about ten elementwise operations, on the CPU and on
// CUDA. Options, state and checkpoints are torch::optim::AdamW's, so a checkpoint written with
// either loads into the other; the arithmetic agrees with it to rounding.
// With StateQuantization().bits(8) the moments of parameters of at least min_elements elements
// are kept in 8 bits (state_quantization.hpp), updated by one fused 8-bit kernel per tensor.
//
//   auto opt = std::make_unique<frugal::FusedAdamW>(model->parameters(), torch::optim::AdamWOptions(3e-5));
//   auto opt8 = std::make_unique<frugal::FusedAdamW>(model->parameters(), torch::optim::AdamWOptions(3e-5),
//                                                    frugal::StateQuantization().bits(8));

#include <torch/optim/adamw.h>

#include <vector>

#include "frugal/optim/state_quantization.hpp"

namespace frugal {

class FusedAdamW : public torch::optim::AdamW, public QuantizedStateOptimizer {
 public:
  explicit FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups, torch::optim::AdamWOptions defaults = {},
                      StateQuantization quantization = {});
  explicit FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults = {}, StateQuantization quantization = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
  /// torch::optim::Optimizer::add_param_group, refusing options the states cannot honour
  /// (amsgrad with 8-bit states) and leaving the optimizer as it was.
  void add_param_group(const torch::optim::OptimizerParamGroup& param_group);
  /// Loads fp32 and 8-bit states alike, converting each to what this optimizer keeps.
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace frugal
