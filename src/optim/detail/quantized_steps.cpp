#include "optim/detail/quantized_steps.hpp"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "frugal/errors.hpp"
#include "frugal/optim/state_quantization.hpp"
#include "optim/detail/code_table.hpp"
#include "base/target_clones.hpp"

namespace frugal::detail {
namespace {

torch::Tensor make_dynamic_map(bool is_signed) {
  // create_dynamic_map(signed, max_exponent_bits=7, total_bits=8): for each decade 10^-6 .. 10^0,
  // the midpoints of an even split of [0.1, 1], scaled; then 0 and 1. Same ops, same floats.
  torch::NoGradGuard no_grad;
  std::vector<float> data;
  constexpr int kMaxExponentBits = 7;
  for (int i = 0; i < kMaxExponentBits; ++i) {
    const int64_t items = is_signed ? (int64_t{1} << i) + 1 : (int64_t{1} << (i + 1)) + 1;
    const torch::Tensor bounds = torch::linspace(0.1, 1, items, torch::kFloat32);
    const torch::Tensor means = (bounds.slice(0, 0, items - 1) + bounds.slice(0, 1)) / 2.0;
    const double scale = std::pow(10.0, -(kMaxExponentBits - 1) + i);
    for (const double sign : is_signed ? std::vector<double>{1.0, -1.0} : std::vector<double>{1.0}) {
      const torch::Tensor scaled = (means * (sign * scale)).contiguous();
      data.insert(data.end(), scaled.data_ptr<float>(), scaled.data_ptr<float>() + scaled.numel());
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  TORCH_INTERNAL_ASSERT(data.size() == 256, "the dynamic map has ", data.size(), " values");
  std::sort(data.begin(), data.end());
  return torch::tensor(data, torch::kFloat32);
}

const CodeTable& cpu_table(bool is_signed) {
  static const CodeTable signed_table(dynamic_map(true)), unsigned_table(dynamic_map(false));
  return is_signed ? signed_table : unsigned_table;
}

static_assert(kQuantizationBlock == 256, "blocks_of in quantized_steps.hpp counts blocks of 256");

// Blocks per parallel task: 4096 elements, above ATen's grain for cheap elementwise work.
constexpr int64_t kBlocksPerTask = 16;

// The per-element update over fp32 arrays of one block, written so the compiler vectorizes it;
// compiled for AVX-512, AVX2 and the baseline and picked at load time. Same results either way:
// no contraction into FMA (ISO C++ mode) and the same IEEE operations.
#define FRUGAL_VECTOR_CLONES FRUGAL_TARGET_CLONES("arch=x86-64-v4", "avx2", "default")

// The loops also find each state's block maximum as they write it (what CodeTable::requantize
// would scan for again): integer maxima of the magnitudes' bit patterns, which order as the
// magnitudes do and keep the loop vectorized. `finite` skips infinities and NaN (>= 0x7f800000).
inline uint32_t magnitude_bits(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }
// magnitude when below 0x7f800000, else 0; as a mask, since GCC does not vectorize the select.
inline uint32_t finite_bits(uint32_t magnitude) { return magnitude & static_cast<uint32_t>(static_cast<int32_t>(magnitude - 0x7f800000u) >> 31); }
inline CodeTable::BlockMaximum block_maximum(uint32_t finite, uint32_t any) { return {std::bit_cast<float>(finite), any >= 0x7f800000u}; }

FRUGAL_VECTOR_CLONES void adam_block(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t len,
                                     const AdamConstants c, CodeTable::BlockMaximum& m_top, CodeTable::BlockMaximum& v_top) {
  uint32_t m_finite = 0, m_any = 0, v_finite = 0, v_any = 0;
  for (int64_t i = 0; i < len; ++i) {
    adam_element(p[i], g[i], m[i], v[i], c);
    const uint32_t mb = magnitude_bits(m[i]), vb = magnitude_bits(v[i]);
    m_any = std::max(m_any, mb);
    m_finite = std::max(m_finite, finite_bits(mb));
    v_any = std::max(v_any, vb);
    v_finite = std::max(v_finite, finite_bits(vb));
  }
  m_top = block_maximum(m_finite, m_any);
  v_top = block_maximum(v_finite, v_any);
}

FRUGAL_VECTOR_CLONES void momentum_block(float* __restrict p, const float* __restrict g, float* __restrict buffer, int64_t len,
                                         const MomentumConstants c, CodeTable::BlockMaximum& top) {
  uint32_t finite = 0, any = 0;
  for (int64_t i = 0; i < len; ++i) {
    momentum_element(p[i], g[i], buffer[i], c);
    const uint32_t b = magnitude_bits(buffer[i]);
    any = std::max(any, b);
    finite = std::max(finite, finite_bits(b));
  }
  top = block_maximum(finite, any);
}

/// A block's values, updated: quantized again with their new finite maximum, stored as `absmax`.
void requantize_block(const CodeTable& table, const float* values, int64_t len, uint8_t* codes, float& absmax) {
  absmax = table.requantize(values, len, codes);
}
void requantize_block(const CodeTable& table, const float* values, int64_t len, CodeTable::BlockMaximum top, uint8_t* codes, float& absmax) {
  table.quantize_block(values, len, top, codes);
  absmax = top.finite_max;
}

// A block of the parameter or gradient as fp32: the tensor's own memory when it is fp32, else
// converted into `buffer` (and, for the parameter, back after the update).
template <typename scalar_t>
float* as_float(scalar_t* data, float* buffer, int64_t len) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    (void)buffer;
    (void)len;
    return data;
  } else {
    for (int64_t i = 0; i < len; ++i) buffer[i] = static_cast<float>(data[i]);
    return buffer;
  }
}
template <typename scalar_t>
const float* as_float(const scalar_t* data, float* buffer, int64_t len) {
  return as_float(const_cast<scalar_t*>(data), buffer, len);  // only read
}
template <typename scalar_t>
void store_float(const float* values, scalar_t* data, int64_t len) {
  if constexpr (!std::is_same_v<scalar_t, float>) {
    for (int64_t i = 0; i < len; ++i) data[i] = static_cast<scalar_t>(values[i]);
  }
}

#if defined(FRUGAL_HAVE_CUDA_KERNELS)
const torch::Tensor& map_on(const c10::Device& device, bool is_signed) {
  static std::mutex mutex;
  static std::map<std::pair<c10::DeviceIndex, bool>, torch::Tensor> maps;
  std::lock_guard<std::mutex> lock(mutex);
  auto& m = maps[{device.index(), is_signed}];
  if (!m.defined()) m = dynamic_map(is_signed).to(device);
  return m;
}
#endif

#if !defined(FRUGAL_HAVE_CUDA_KERNELS)
[[noreturn]] void no_cuda_kernels() {
  throw TrainingError("optimizer.state_bits=8 on CUDA: this Frugal was built without its CUDA kernels (no nvcc when it was configured)");
}
#endif

void check_state(const torch::Tensor& param, const QuantizedValues& q, const char* what) {
  if (q.codes.scalar_type() != torch::kUInt8 || q.codes.numel() != param.numel() || !q.codes.is_contiguous() ||
      q.absmax.scalar_type() != torch::kFloat32 || q.absmax.numel() != blocks_of(param.numel()) || !q.absmax.is_contiguous() ||
      q.codes.device() != param.device() || q.absmax.device() != param.device()) {
    throw TrainingError(c10::str("8-bit optimizer state '", what, "' does not fit its parameter of ", param.numel(), " elements on ",
                                 param.device(), ": ", q.codes.numel(), " codes (", q.codes.scalar_type(), ") and ", q.absmax.numel(),
                                 " block maxima"));
  }
}

// Runs `step` on contiguous row-major views of the parameter and its gradient (a channels-last
// weight is stepped in a contiguous copy), then puts the result back.
template <class Step>
void on_contiguous(const torch::Tensor& param, const torch::Tensor& grad, Step&& step) {
  torch::NoGradGuard no_grad;
  const torch::Tensor g = grad.to(param.scalar_type()).contiguous();
  if (param.is_contiguous()) {
    step(param, g);
    return;
  }
  torch::Tensor p = param.contiguous();
  step(p, g);
  param.copy_(p);
}

}  // namespace

const torch::Tensor& dynamic_map(bool is_signed) {
  static const torch::Tensor signed_map = make_dynamic_map(true), unsigned_map = make_dynamic_map(false);
  return is_signed ? signed_map : unsigned_map;
}

QuantizedValues quantize_blockwise(const torch::Tensor& values, bool is_signed) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = values.to(torch::kFloat32).contiguous().reshape({-1});
  const int64_t n = x.numel();
  QuantizedValues q{torch::empty({n}, x.options().dtype(torch::kUInt8)), torch::empty({blocks_of(n)}, x.options())};
  if (x.is_cuda()) {
#if defined(FRUGAL_HAVE_CUDA_KERNELS)
    quantize_blockwise_cuda(x, map_on(x.device(), is_signed), q);
    return q;
#else
    no_cuda_kernels();
#endif
  }
  const CodeTable& table = cpu_table(is_signed);
  const float* in = x.data_ptr<float>();
  uint8_t* codes = q.codes.data_ptr<uint8_t>();
  float* absmax = q.absmax.data_ptr<float>();
  at::parallel_for(0, blocks_of(n), kBlocksPerTask, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kQuantizationBlock;
      requantize_block(table, in + begin, std::min(n, begin + kQuantizationBlock) - begin, codes + begin, absmax[b]);
    }
  });
  return q;
}

torch::Tensor dequantize_blockwise(const QuantizedValues& q, bool is_signed) {
  torch::NoGradGuard no_grad;
  const int64_t n = q.codes.numel();
  torch::Tensor out = torch::empty({n}, q.absmax.options());
  if (q.codes.is_cuda()) {
#if defined(FRUGAL_HAVE_CUDA_KERNELS)
    dequantize_blockwise_cuda(q, map_on(q.codes.device(), is_signed), out);
    return out;
#else
    no_cuda_kernels();
#endif
  }
  const CodeTable& table = cpu_table(is_signed);
  const uint8_t* codes = q.codes.data_ptr<uint8_t>();
  const float* absmax = q.absmax.data_ptr<float>();
  float* values = out.data_ptr<float>();
  at::parallel_for(0, blocks_of(n), kBlocksPerTask, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kQuantizationBlock;
      table.dequantize(codes + begin, absmax[b], values + begin, std::min(n, begin + kQuantizationBlock) - begin);
    }
  });
  return out;
}

void adam_step_8bit(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& m, QuantizedValues& v, const AdamConstants& c) {
  check_state(param, m, "exp_avg");
  check_state(param, v, "exp_avg_sq");
  on_contiguous(param, grad, [&](const torch::Tensor& p, const torch::Tensor& g) {
    if (p.is_cuda()) {
#if defined(FRUGAL_HAVE_CUDA_KERNELS)
      adam_step_8bit_cuda(p, g, m, v, map_on(p.device(), true), map_on(p.device(), false), c);
      return;
#else
      no_cuda_kernels();
#endif
    }
    const CodeTable& sm = cpu_table(true);
    const CodeTable& um = cpu_table(false);
    const int64_t n = p.numel();
    uint8_t* mc = m.codes.data_ptr<uint8_t>();
    uint8_t* vc = v.codes.data_ptr<uint8_t>();
    float* ma = m.absmax.data_ptr<float>();
    float* va = v.absmax.data_ptr<float>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.scalar_type(), "adam_step_8bit", [&] {
      scalar_t* pp = p.data_ptr<scalar_t>();
      const scalar_t* gp = g.data_ptr<scalar_t>();
      at::parallel_for(0, blocks_of(n), kBlocksPerTask, [&](int64_t b0, int64_t b1) {
        alignas(64) float pv[kQuantizationBlock], gv[kQuantizationBlock], mv[kQuantizationBlock], vv[kQuantizationBlock];
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t begin = b * kQuantizationBlock, len = std::min(kQuantizationBlock, n - begin);
          float* pf = as_float(pp + begin, pv, len);
          sm.dequantize(mc + begin, ma[b], mv, len);
          um.dequantize(vc + begin, va[b], vv, len);
          CodeTable::BlockMaximum m_top, v_top;
          adam_block(pf, as_float(gp + begin, gv, len), mv, vv, len, c, m_top, v_top);
          store_float(pf, pp + begin, len);
          requantize_block(sm, mv, len, m_top, mc + begin, ma[b]);
          requantize_block(um, vv, len, v_top, vc + begin, va[b]);
        }
      });
    });
  });
}

void momentum_step_8bit(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& buffer, const MomentumConstants& c) {
  check_state(param, buffer, "momentum_buffer");
  on_contiguous(param, grad, [&](const torch::Tensor& p, const torch::Tensor& g) {
    if (p.is_cuda()) {
#if defined(FRUGAL_HAVE_CUDA_KERNELS)
      momentum_step_8bit_cuda(p, g, buffer, map_on(p.device(), true), c);
      return;
#else
      no_cuda_kernels();
#endif
    }
    const CodeTable& sm = cpu_table(true);
    const int64_t n = p.numel();
    uint8_t* codes = buffer.codes.data_ptr<uint8_t>();
    float* absmax = buffer.absmax.data_ptr<float>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.scalar_type(), "momentum_step_8bit", [&] {
      scalar_t* pp = p.data_ptr<scalar_t>();
      const scalar_t* gp = g.data_ptr<scalar_t>();
      at::parallel_for(0, blocks_of(n), kBlocksPerTask, [&](int64_t b0, int64_t b1) {
        alignas(64) float pv[kQuantizationBlock], gv[kQuantizationBlock], values[kQuantizationBlock];
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t begin = b * kQuantizationBlock, len = std::min(kQuantizationBlock, n - begin);
          float* pf = as_float(pp + begin, pv, len);
          sm.dequantize(codes + begin, absmax[b], values, len);
          CodeTable::BlockMaximum top;
          momentum_block(pf, as_float(gp + begin, gv, len), values, len, c, top);
          store_float(pf, pp + begin, len);
          requantize_block(sm, values, len, top, codes + begin, absmax[b]);
        }
      });
    });
  });
}

}  // namespace frugal::detail
