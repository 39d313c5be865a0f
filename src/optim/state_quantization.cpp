#include "frugal/optim/state_quantization.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "frugal/errors.hpp"

namespace frugal {

void StateQuantization::validate() const {
  if (bits() != 32 && bits() != 8) throw OptionError("state_bits", c10::str("state_bits must be 32 or 8, got ", bits()));
  if (min_elements() < 0) {
    throw OptionError("state_min_elements", c10::str("state_min_elements must be >= 0, got ", min_elements()));
  }
}

QuantizedStateOptimizer::QuantizedStateOptimizer(StateQuantization quantization) : quantization_(quantization) {
  quantization_.validate();
}

void QuantizedStateOptimizer::set_whole_numel(const torch::Tensor& piece, int64_t whole_numel) {
  whole_numel_[piece.unsafeGetTensorImpl()] = whole_numel;
}

bool QuantizedStateOptimizer::quantized(const torch::Tensor& param) const {
  if (quantization_.bits() != 8) return false;
  const auto it = whole_numel_.find(param.unsafeGetTensorImpl());
  return (it == whole_numel_.end() ? param.numel() : it->second) >= quantization_.min_elements();
}

const QuantizedStateOptimizer* quantized_states_of(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const QuantizedStateOptimizer*>(&optimizer);
}

QuantizedStateOptimizer* quantized_states_of(torch::optim::Optimizer& optimizer) { return dynamic_cast<QuantizedStateOptimizer*>(&optimizer); }

}  // namespace frugal
