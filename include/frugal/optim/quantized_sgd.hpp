#pragma once
// torch::optim::SGD (momentum, dampening, Nesterov, weight decay: the same arithmetic) whose
// momentum buffers can be kept in 8 bits (state_quantization.hpp; bitsandbytes' SGD8bit). With
// fp32 states its state and checkpoints are torch::optim::SGD's.
//
//   frugal::QuantizedSGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9),
//                            frugal::StateQuantization().bits(8));

#include <torch/optim/sgd.h>

#include <vector>

#include "frugal/optim/state_quantization.hpp"

namespace frugal {

class QuantizedSGD : public torch::optim::SGD, public QuantizedStateOptimizer {
 public:
  explicit QuantizedSGD(std::vector<torch::optim::OptimizerParamGroup> param_groups, torch::optim::SGDOptions defaults,
                        StateQuantization quantization = {});
  explicit QuantizedSGD(std::vector<torch::Tensor> params, torch::optim::SGDOptions defaults, StateQuantization quantization = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
  void load(torch::serialize::InputArchive& archive) override;
  const char* optimizer_name() const override { return "frugal::QuantizedSGD"; }
};

}  // namespace frugal
