#pragma once
// Block-wise 8-bit states (frugal/optim/state_quantization.hpp): the dynamic quantization maps,
// conversion between fp32 and 8-bit states, and the fused update steps. Every function runs on
// the tensors' device: the CPU kernels here, the CUDA kernels in quantized_steps.cu.
#include <torch/types.h>

#include "optim/detail/quantized_math.hpp"

namespace frugal::detail {

/// bitsandbytes.functional.create_dynamic_map(signed): 256 ascending fp32 values in [-1, 1]
/// (signed) or [0, 1], made by the same ATen operations, so equal to bitsandbytes' bit for bit.
const torch::Tensor& dynamic_map(bool is_signed);

/// Quantization blocks over `numel` elements (the last one may be partial).
inline int64_t blocks_of(int64_t numel) { return (numel + 255) / 256; }

/// One 8-bit state tensor: a code a value, and one absolute maximum a block.
struct QuantizedValues {
  torch::Tensor codes;   // uint8, the values' number of elements
  torch::Tensor absmax;  // fp32, ceil(elements / kQuantizationBlock)
};

/// The elements of `values` in order, quantized block by block (on their device).
QuantizedValues quantize_blockwise(const torch::Tensor& values, bool is_signed);
/// fp32 values of `q`, flat.
torch::Tensor dequantize_blockwise(const QuantizedValues& q, bool is_signed);

/// One Adam step on `param` with 8-bit moments (`m` signed, `v` unsigned), all on one device.
void adam_step_8bit(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& m, QuantizedValues& v,
                    const AdamConstants& c);
/// One SGD momentum step with an 8-bit (signed) momentum buffer.
void momentum_step_8bit(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& buffer, const MomentumConstants& c);

#if defined(FRUGAL_HAVE_CUDA_KERNELS)
// quantized_steps.cu: the same on CUDA tensors, on the current stream.
void quantize_blockwise_cuda(const torch::Tensor& values, const torch::Tensor& map, QuantizedValues& out);
void dequantize_blockwise_cuda(const QuantizedValues& q, const torch::Tensor& map, torch::Tensor& out);
void adam_step_8bit_cuda(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& m, QuantizedValues& v,
                         const torch::Tensor& signed_map, const torch::Tensor& unsigned_map, const AdamConstants& c);
void momentum_step_8bit_cuda(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& buffer,
                             const torch::Tensor& signed_map, const MomentumConstants& c);
#endif

}  // namespace frugal::detail
