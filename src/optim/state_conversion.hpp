#pragma once
// Loading into an optimizer with quantizable states: its base class's load() has put the
// options and the fp32 states in place; here the archive's 8-bit states are added, and every
// state is converted to what the optimizer keeps for its tensor. An 8-bit state loaded as fp32
// is exact (its dequantized values); an fp32 state loaded as 8-bit takes the quantization error
// of one step (docs/optim.md).
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "frugal/optim/state_quantization.hpp"
#include "optim/quantized_param_state.hpp"

namespace frugal::detail {

/// How one optimizer's fp32 state holds the moments.
struct Fp32StateForm {
  struct Moments {
    int64_t step = 0;
    std::vector<torch::Tensor> values;  // one a MomentSpec, the parameter's shape
  };
  /// The moments of an fp32 state, or nothing when it has none yet.
  std::function<std::optional<Moments>(const torch::optim::OptimizerParamState&)> read;
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>(Moments)> make;
};

void adopt_quantized_states(torch::optim::Optimizer& optimizer, const QuantizedStateOptimizer& quantization,
                            torch::serialize::InputArchive& archive, const std::vector<MomentSpec>& specs, const Fp32StateForm& form);

}  // namespace frugal::detail
