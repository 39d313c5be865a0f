#include "optim/detail/code_table.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "optim/detail/code_table_kernels.hpp"
#include "optim/detail/quantized_math.hpp"

namespace frugal::detail {
namespace {

// Floats in order as signed integers: the bisection between two codes walks these.
int32_t ordered(float x) {
  const auto i = std::bit_cast<int32_t>(x);
  return i < 0 ? i ^ 0x7fffffff : i;
}
float from_ordered(int32_t i) { return std::bit_cast<float>(i < 0 ? i ^ 0x7fffffff : i); }

// The smallest float between code[i] and code[i + 1] that nearest_code moves up to code[i + 1].
// Its comparison is monotone in x (both rounded distances are), so bisection finds the flip.
float threshold_between(const float* code, int i) {
  int32_t lo = ordered(code[i]), hi = ordered(code[i + 1]);  // stays below at lo, moves up at hi
  while (hi - lo > 1) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (nearest_code(code, i, from_ordered(mid)) == i + 1) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return from_ordered(hi);
}

}  // namespace

CodeTable::CodeTable(const torch::Tensor& map) : bucket_(static_cast<size_t>(2 * kKeys)) {
  TORCH_INTERNAL_ASSERT(map.numel() == 256 && map.scalar_type() == torch::kFloat32 && map.is_contiguous(), "a map of 256 fp32 codes");
  std::memcpy(code_.data(), map.data_ptr<float>(), sizeof(float) * 256);
  std::vector<float> thresholds;
  for (int i = 0; i < 255; ++i) thresholds.push_back(threshold_between(code_.data(), i));
  auto count_at_or_below = [&](float x) { return static_cast<uint32_t>(std::upper_bound(thresholds.begin(), thresholds.end(), x) - thresholds.begin()); };
  for (int negative = 0; negative < 2; ++negative) {
    for (int key = 0; key < kKeys; ++key) {
      // The key's magnitudes; key 0 also holds every smaller one, coded as 2^-23 is.
      const uint32_t low_magnitude = key == 0 ? 0u : kLowest + (static_cast<uint32_t>(key) << 16);
      const uint32_t high_magnitude = std::min(kLowest + (static_cast<uint32_t>(key) << 16) + 0xffffu, kOne);
      const float lowest = negative ? -std::bit_cast<float>(high_magnitude) : std::bit_cast<float>(low_magnitude);
      const float highest = negative ? -std::bit_cast<float>(low_magnitude) : std::bit_cast<float>(high_magnitude);
      const uint32_t first = count_at_or_below(lowest), last = count_at_or_below(highest);
      TORCH_INTERNAL_ASSERT(last - first <= 1, "the quantization map has two thresholds under one key (", key, ")");
      uint32_t threshold_bits = 0x10000u;  // none: never reached
      if (last != first) {
        const uint32_t magnitude = std::bit_cast<uint32_t>(thresholds[first]) & 0x7fffffffu;
        TORCH_INTERNAL_ASSERT(key > 0 && magnitude >= kLowest, "a threshold of the quantization map lies below 2^-23");
        const uint32_t low = (magnitude - kLowest) & 0xffffu;
        threshold_bits = negative ? 0xffffu - low : low;
      }
      bucket_[static_cast<size_t>(negative * kKeys + key)] = first | (threshold_bits << 8);
    }
  }
  for (int i = 0; i < 256; ++i) {
    const auto bits = std::bit_cast<uint32_t>(code_[static_cast<size_t>(i)]);
    for (int b = 0; b < 4; ++b) value_bytes_[static_cast<size_t>(b * 256 + i)] = static_cast<uint8_t>(bits >> (8 * b));
  }
}

uint8_t CodeTable::code_of(float y) const {
  const uint32_t bits = std::bit_cast<uint32_t>(sanitized(y));
  const uint32_t negative = bits >> 31;
  const uint32_t magnitude = std::clamp(bits & 0x7fffffffu, kLowest, kOne) - kLowest;
  const uint32_t bucket = bucket_[(magnitude >> 16) + negative * static_cast<uint32_t>(kKeys)];
  const uint32_t low = (magnitude & 0xffffu) ^ (negative ? 0xffffu : 0u);
  return static_cast<uint8_t>((bucket & 0xffu) + (low >= (bucket >> 8) ? 1u : 0u));
}

void CodeTable::quantize_scalar(const float* x, float absmax, uint8_t* out, int64_t len) const {
  for (int64_t i = 0; i < len; ++i) out[i] = code_of(normed(x[i], absmax));
}

void CodeTable::dequantize_scalar(const uint8_t* codes, float scale, float* out, int64_t len) const {
  for (int64_t i = 0; i < len; ++i) out[i] = code_[codes[i]] * scale;
}

void CodeTable::quantize(const float* x, float absmax, uint8_t* out, int64_t len) const {
  const int64_t done = vector_kernels().quantize(*this, x, absmax, /*finite=*/false, out, len);
  quantize_scalar(x + done, absmax, out + done, len - done);
}

float CodeTable::requantize(const float* x, int64_t len, uint8_t* out) const {
  float top = 0.0f;
  bool nonfinite = false;
  for (int64_t i = vector_kernels().scan(x, len, &top, &nonfinite); i < len; ++i) {
    top = std::max(top, finite_magnitude(x[i]));
    nonfinite = nonfinite || !(fabsf(x[i]) < INFINITY);
  }
  const int64_t done = vector_kernels().quantize(*this, x, top, !nonfinite, out, len);
  quantize_scalar(x + done, top, out + done, len - done);
  return top;
}

void CodeTable::dequantize(const uint8_t* codes, float scale, float* out, int64_t len) const {
  const int64_t done = vector_kernels().dequantize(*this, codes, scale, out, len);
  dequantize_scalar(codes + done, scale, out + done, len - done);
}

float CodeTable::finite_max(const float* x, int64_t len) {
  float top = 0.0f;
  bool nonfinite = false;
  for (int64_t i = vector_kernels().scan(x, len, &top, &nonfinite); i < len; ++i) top = std::max(top, finite_magnitude(x[i]));
  return top;
}

const char* CodeTable::vector_path() { return vector_kernels().name; }

}  // namespace frugal::detail
