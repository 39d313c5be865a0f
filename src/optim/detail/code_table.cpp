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
  for (int negative = 0; negative < 2; ++negative) {
    for (int key = 0; key < kKeys; ++key) {
      // u: a value's place in the key, 0 to 0xffff in ascending order of values (the magnitude's
      // low 16 bits, flipped for negative values); key 0 also holds every magnitude below 2^-23
      // and the top key every one above 1, clamped. A threshold's u may lie outside 0..0xffff.
      const int64_t key_start = kLowest + (int64_t{key} << 16);
      auto u_of = [&](float t) {
        const int64_t offset = int64_t{std::bit_cast<uint32_t>(t) & 0x7fffffffu} - key_start;
        return negative ? 0xffff - offset : offset;
      };
      const float first_value = negative ? -std::bit_cast<float>(static_cast<uint32_t>(key_start + 0xffff)) : std::bit_cast<float>(static_cast<uint32_t>(key_start));
      uint32_t count = 0;  // thresholds below the key's first value
      std::vector<int64_t> inner, below, above;  // u of this sign's thresholds in the key, and within the slack of it
      for (const float t : thresholds) {
        if (t < first_value) ++count;
        if ((t < 0.0f) != (negative == 1)) continue;
        TORCH_INTERNAL_ASSERT((std::bit_cast<uint32_t>(t) & 0x7fffffffu) >= kLowest, "a threshold of the quantization map lies below 2^-23");
        const int64_t u = u_of(t);
        if (u >= 0 && u <= 0xffff) inner.push_back(u);
        if (u >= -int64_t{kProductSlack} && u < 0) below.push_back(u);
        if (u > 0xffff && u <= 0xffff + int64_t{kProductSlack}) above.push_back(u);
      }
      // The field shows one threshold; where one within kProductSlack does not show, the AVX2
      // path must not code this table's values by product.
      uint32_t threshold = 0x1ffffu;  // none: low never reaches it
      bool hidden = !below.empty() && (!inner.empty() || !above.empty());
      if (inner.size() == 2 && std::min(inner[0], inner[1]) == 0) {
        ++count;  // one threshold at the key's first value (counted), one further in: rare
        threshold = static_cast<uint32_t>(std::max(inner[0], inner[1]));
        hidden = true;
      } else {
        TORCH_INTERNAL_ASSERT(inner.size() <= 1, "the quantization map has two thresholds under one key (", key, ")");
        if (!inner.empty()) {
          threshold = static_cast<uint32_t>(inner[0]);
          hidden = hidden || !above.empty();
        } else if (!above.empty()) {
          threshold = static_cast<uint32_t>(above[0]);  // never reached by low (<= 0xffff), but near it
        } else if (!below.empty()) {
          --count;        // the threshold just before the key, as if at its first value: the same
          threshold = 0;  // codes, and the first values lie within the slack of the field
        }
      }
      product_path_ = product_path_ && !hidden;
      bucket_[static_cast<size_t>(negative * kKeys + key)] = count | (threshold << 8);
    }
  }
  for (int i = 0; i < 256; ++i) {
    const auto bits = std::bit_cast<uint32_t>(code_[static_cast<size_t>(i)]);
    for (int b = 0; b < 4; ++b) value_bytes_[static_cast<size_t>(b * 256 + i)] = static_cast<uint8_t>(bits >> (8 * b));
  }
}

namespace {

// Where a value's bits fall: its key's bucket, and its place in the key (flipped for negative values).
struct Place {
  uint32_t bucket, low;
};
Place place_of(const std::vector<uint32_t>& buckets, uint32_t bits) {
  const uint32_t negative = bits >> 31;
  const uint32_t magnitude = std::clamp(bits & 0x7fffffffu, CodeTable::kLowest, CodeTable::kOne) - CodeTable::kLowest;
  return {buckets[(magnitude >> 16) + negative * static_cast<uint32_t>(CodeTable::kKeys)], (magnitude & 0xffffu) ^ (negative ? 0xffffu : 0u)};
}

}  // namespace

uint8_t CodeTable::code_of(float y) const {
  const Place p = place_of(bucket_, std::bit_cast<uint32_t>(sanitized(y)));
  return static_cast<uint8_t>((p.bucket & 0xffu) + (p.low >= (p.bucket >> 8) ? 1u : 0u));
}

bool CodeTable::near_threshold(float y) const {
  const Place p = place_of(bucket_, std::bit_cast<uint32_t>(y));
  return static_cast<uint32_t>(std::abs(static_cast<int32_t>(p.low) - static_cast<int32_t>(p.bucket >> 8))) <= kProductSlack;
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
  BlockMaximum top;
  for (int64_t i = vector_kernels().scan(x, len, &top.finite_max, &top.nonfinite); i < len; ++i) {
    top.finite_max = std::max(top.finite_max, finite_magnitude(x[i]));
    top.nonfinite = top.nonfinite || !(fabsf(x[i]) < INFINITY);
  }
  quantize_block(x, len, top, out);
  return top.finite_max;
}

void CodeTable::quantize_block(const float* x, int64_t len, BlockMaximum top, uint8_t* out) const {
  const int64_t done = vector_kernels().quantize(*this, x, top.finite_max, !top.nonfinite, out, len);
  quantize_scalar(x + done, top.finite_max, out + done, len - done);
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
