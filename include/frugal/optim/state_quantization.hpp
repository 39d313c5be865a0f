#pragma once
// 8-bit optimizer states (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR
// 2022; bitsandbytes): each per-element state tensor (Adam's two moments, SGD's momentum) is kept
// as one byte a value, in blocks of 256 values that share one fp32 absolute maximum, through the
// dynamic quantization map (signed for the first moment and momentum, unsigned for the second
// moment). A step dequantizes a block, updates it and the parameter in fp32, and quantizes it
// again, in one pass (CPU: at::parallel_for over blocks; CUDA: one thread block a block).
// Tensors below `min_elements` keep fp32 states, as bitsandbytes does. Adam's state drops from 8
// to about 2 bytes a parameter.
//
//   frugal::FusedAdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-4),
//                          frugal::StateQuantization().bits(8));

#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <unordered_map>

namespace c10 {
struct TensorImpl;
}

namespace frugal {

/// Values that share one absolute maximum.
inline constexpr int64_t kQuantizationBlock = 256;

struct StateQuantization {
  /// OptionError naming "state_bits" or "state_min_elements" for a bad value.
  void validate() const;
  /// 32: fp32 states; 8: block-wise 8-bit states.
  TORCH_ARG(int64_t, bits) = 32;
  /// Parameters with fewer elements keep fp32 states (biases, norms: little memory, sensitive).
  TORCH_ARG(int64_t, min_elements) = 4096;
};

/// What Frugal's optimizers with quantizable states (FusedAdamW, FusedAdam, FusedSGD) share:
/// which tensors get 8-bit states, and what a sharded optimizer needs to keep the blocks of a
/// piece of a parameter where they are in the whole parameter.
class QuantizedStateOptimizer {
 public:
  virtual ~QuantizedStateOptimizer() = default;
  const StateQuantization& state_quantization() const { return quantization_; }
  /// The optimizer's class as messages name it ("frugal::FusedAdamW").
  virtual const char* optimizer_name() const = 0;
  /// Elements a piece of a parameter must start at a multiple of for its blocks to be the
  /// whole parameter's: the block with 8-bit states, else 1.
  int64_t state_alignment() const { return quantization_.bits() == 8 ? kQuantizationBlock : 1; }
  /// `piece` (a tensor this optimizer updates) is a range of a parameter of `whole_numel`
  /// elements: the small-tensor rule looks at the whole parameter, so that a sharded run keeps
  /// the same states as an unsharded one.
  void set_whole_numel(const torch::Tensor& piece, int64_t whole_numel);
  /// Whether `param` (one this optimizer updates) has 8-bit states.
  bool quantized(const torch::Tensor& param) const;

 protected:
  explicit QuantizedStateOptimizer(StateQuantization quantization);

 private:
  StateQuantization quantization_;
  std::unordered_map<const c10::TensorImpl*, int64_t> whole_numel_;
};

/// The one question every area asks of an optimizer: how are its states kept? Frugal's
/// optimizers answer with their quantization; any other (torch's own) has none: nullptr.
const QuantizedStateOptimizer* quantized_states_of(const torch::optim::Optimizer& optimizer);
QuantizedStateOptimizer* quantized_states_of(torch::optim::Optimizer& optimizer);
/// Whether `optimizer` keeps 8-bit states for some of its tensors.
inline bool has_8bit_states(const torch::optim::Optimizer& optimizer) {
  const auto* q = quantized_states_of(optimizer);
  return q != nullptr && q->state_quantization().bits() == 8;
}

}  // namespace frugal
