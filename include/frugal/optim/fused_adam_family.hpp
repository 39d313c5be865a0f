#pragma once
// Adam and AdamW whose step is one fused kernel per group of parameters (ATen's _fused_adam_ and
// _fused_adamw_, what torch.optim.Adam(W)(fused=True) and Hugging Face's Trainer use): one pass
// over each parameter, gradient and moment instead of about ten elementwise operations, on the
// CPU and on CUDA. Options, state and checkpoints are torch::optim::Adam(W)'s, so a checkpoint
// written with either loads into the other; the arithmetic agrees with it to rounding. The two
// differ only in weight decay: FusedAdam adds it to the gradient (L2, torch::optim::Adam),
// FusedAdamW decays the weights (decoupled, torch::optim::AdamW).
// With StateQuantization().bits(8) the moments of parameters of at least min_elements elements
// are kept in 8 bits (state_quantization.hpp), updated by one fused 8-bit kernel per tensor.
//
//   auto opt = std::make_unique<frugal::FusedAdamW>(model->parameters(), torch::optim::AdamWOptions(3e-5));
//   auto opt8 = std::make_unique<frugal::FusedAdam>(model->parameters(), torch::optim::AdamOptions(1e-3),
//                                                   frugal::StateQuantization().bits(8));

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <vector>

#include "frugal/optim/state_quantization.hpp"

namespace frugal {

template <class Base, class Options>
class FusedAdamFamily : public Base, public QuantizedStateOptimizer {
 public:
  explicit FusedAdamFamily(std::vector<torch::optim::OptimizerParamGroup> param_groups, Options defaults = {},
                           StateQuantization quantization = {});
  explicit FusedAdamFamily(std::vector<torch::Tensor> params, Options defaults = {}, StateQuantization quantization = {});
  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override;
  /// torch::optim::Optimizer::add_param_group, refusing options the states cannot honour
  /// (amsgrad with 8-bit states) and leaving the optimizer as it was.
  void add_param_group(const torch::optim::OptimizerParamGroup& param_group);
  /// Loads fp32 and 8-bit states alike, converting each to what this optimizer keeps.
  void load(torch::serialize::InputArchive& archive) override;
  const char* optimizer_name() const override;
};

using FusedAdam = FusedAdamFamily<torch::optim::Adam, torch::optim::AdamOptions>;
using FusedAdamW = FusedAdamFamily<torch::optim::AdamW, torch::optim::AdamWOptions>;
extern template class FusedAdamFamily<torch::optim::Adam, torch::optim::AdamOptions>;
extern template class FusedAdamFamily<torch::optim::AdamW, torch::optim::AdamWOptions>;

}  // namespace frugal
