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

// The map for quantizing on the CPU without a binary search. The top 17 bits of an fp32 value
// (sign, exponent, 8 bits of mantissa) name a range of values narrower than the gap between two
// codes nearly everywhere, so at most one midpoint between codes falls inside it: `lookup` holds
// the nearest code of the range's lowest value, i, and the nearest code of any value in the range
// is i or i + 1, decided by the same distance comparison as nearest_code (ties to the lower).
// Ranges holding two midpoints, or NaN, are flagged and searched.
struct CpuMap {
  static constexpr int kShift = 15;
  static constexpr uint16_t kSearch = 0x100;
  std::array<float, 257> code{};  // the map, then +inf: code[i + 1] always exists and is never nearer
  std::vector<uint16_t> lookup;

  explicit CpuMap(const torch::Tensor& map) : lookup(size_t{1} << (32 - kShift)) {
    std::memcpy(code.data(), map.data_ptr<float>(), sizeof(float) * 256);
    code[256] = std::numeric_limits<float>::infinity();
    for (uint32_t key = 0; key < lookup.size(); ++key) {
      const uint32_t bits = key << kShift, all = bits | ((1u << kShift) - 1);
      const bool negative = (bits >> 31) != 0;
      const float lowest = std::bit_cast<float>(negative ? all : bits), highest = std::bit_cast<float>(negative ? bits : all);
      if (std::isnan(lowest) || std::isnan(highest)) {
        lookup[key] = kSearch;
        continue;
      }
      const uint8_t low = nearest(lowest), high = nearest(highest);
      lookup[key] = high - low <= 1 ? low : static_cast<uint16_t>(kSearch | low);
    }
  }
  uint8_t nearest(float x) const {
    const auto it = std::upper_bound(code.begin(), code.begin() + 256, x);
    const int below = it == code.begin() ? 0 : static_cast<int>(it - code.begin()) - 1;
    return nearest_code(code.data(), below, x);
  }
  /// The codes of `len` values already divided by their block's maximum.
  void quantize(const float* x, uint8_t* out, int64_t len) const {
    const uint16_t* table = lookup.data();
    const float* c = code.data();
    for (int64_t i = 0; i < len; ++i) {
      const float v = x[i];
      const uint16_t t = table[std::bit_cast<uint32_t>(v) >> kShift];
      const int low = t & 0xff;
      const int up = fabsf(v - c[low + 1]) < fabsf(v - c[low]) ? 1 : 0;
      out[i] = (t & kSearch) ? nearest(v) : static_cast<uint8_t>(low + up);
    }
  }
};

const CpuMap& cpu_map(bool is_signed) {
  static const CpuMap signed_map(dynamic_map(true)), unsigned_map(dynamic_map(false));
  return is_signed ? signed_map : unsigned_map;
}

static_assert(kQuantizationBlock == 256, "blocks_of in quantized_steps.hpp counts blocks of 256");

// Blocks per parallel task: 4096 elements, above ATen's grain for cheap elementwise work.
constexpr int64_t kBlocksPerTask = 16;

// The per-block loops, over fp32 arrays of one block, written so the compiler vectorizes them;
// compiled twice (AVX2 and the baseline) and picked at load time. Same results either way: no
// contraction into FMA (ISO C++ mode) and the same IEEE operations.
#define FRUGAL_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))

FRUGAL_VECTOR_CLONES void dequantize_block(const float* map, const uint8_t* codes, float scale, float* out, int64_t len) {
  for (int64_t i = 0; i < len; ++i) out[i] = map[codes[i]] * scale;
}

FRUGAL_VECTOR_CLONES void adam_block(float* p, const float* g, float* m, float* v, int64_t len, const AdamConstants c) {
  for (int64_t i = 0; i < len; ++i) adam_element(p[i], g[i], m[i], v[i], c);
}

FRUGAL_VECTOR_CLONES void momentum_block(float* p, const float* g, float* buffer, int64_t len, const MomentumConstants c) {
  for (int64_t i = 0; i < len; ++i) momentum_element(p[i], g[i], buffer[i], c);
}

// The largest |x| (by its bits: a non-negative float orders as its bit pattern), and x divided by it.
FRUGAL_VECTOR_CLONES float normalize_block(float* x, int64_t len) {
  uint32_t top = 0;
  for (int64_t i = 0; i < len; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    top = bits > top ? bits : top;
  }
  const float absmax = std::bit_cast<float>(top);
  for (int64_t i = 0; i < len; ++i) x[i] = normed(x[i], absmax);
  return absmax;
}

template <typename scalar_t>
void to_float(const scalar_t* in, float* out, int64_t len) {
  for (int64_t i = 0; i < len; ++i) out[i] = static_cast<float>(in[i]);
}
template <typename scalar_t>
void from_float(const float* in, scalar_t* out, int64_t len) {
  for (int64_t i = 0; i < len; ++i) out[i] = static_cast<scalar_t>(in[i]);
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
  const CpuMap& map = cpu_map(is_signed);
  const float* in = x.data_ptr<float>();
  uint8_t* codes = q.codes.data_ptr<uint8_t>();
  float* absmax = q.absmax.data_ptr<float>();
  at::parallel_for(0, blocks_of(n), kBlocksPerTask, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kQuantizationBlock, end = std::min(n, begin + kQuantizationBlock);
      alignas(64) float values[kQuantizationBlock];
      std::copy(in + begin, in + end, values);
      absmax[b] = normalize_block(values, end - begin);
      map.quantize(values, codes + begin, end - begin);
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
  const CpuMap& map = cpu_map(is_signed);
  const uint8_t* codes = q.codes.data_ptr<uint8_t>();
  const float* absmax = q.absmax.data_ptr<float>();
  float* values = out.data_ptr<float>();
  at::parallel_for(0, n, kBlocksPerTask * kQuantizationBlock, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) values[i] = map.code[codes[i]] * absmax[i / kQuantizationBlock];
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
    const CpuMap& sm = cpu_map(true);
    const CpuMap& um = cpu_map(false);
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
          to_float(pp + begin, pv, len);
          to_float(gp + begin, gv, len);
          dequantize_block(sm.code.data(), mc + begin, ma[b], mv, len);
          dequantize_block(um.code.data(), vc + begin, va[b], vv, len);
          adam_block(pv, gv, mv, vv, len, c);
          from_float(pv, pp + begin, len);
          ma[b] = normalize_block(mv, len);
          va[b] = normalize_block(vv, len);
          sm.quantize(mv, mc + begin, len);
          um.quantize(vv, vc + begin, len);
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
    const CpuMap& sm = cpu_map(true);
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
          to_float(pp + begin, pv, len);
          to_float(gp + begin, gv, len);
          dequantize_block(sm.code.data(), codes + begin, absmax[b], values, len);
          momentum_block(pv, gv, values, len, c);
          from_float(pv, pp + begin, len);
          absmax[b] = normalize_block(values, len);
          sm.quantize(values, codes + begin, len);
        }
      });
    });
  });
}

}  // namespace frugal::detail
