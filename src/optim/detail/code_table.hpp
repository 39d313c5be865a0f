#pragma once
// The nearest code of a dynamic quantization map without a search, for the CPU kernels.
//
// nearest_code's choice between two neighbouring codes flips at one float, the pair's threshold
// (found once by bisection over the floats between them), so the code of y is the number of
// thresholds <= y. A table keyed by the top bits of |y| (its binade and 7 bits of mantissa; every
// |y| below 2^-23 shares the first key) holds, per sign and key, the count at the key's first
// value and the low 16 bits of the one threshold the key's range may hold: one load and one
// compare give the code, exactly the code the search gives (the builder checks that no range holds
// two thresholds; a test compares the two on every float of [-1, 1]).
//
// quantize() divides by the block's maximum first and maps what is not finite as the CUDA kernel
// does (quantized_math.hpp): NaN to the code of 0, beyond +-1 to the end codes. Vector code paths
// (AVX2; AVX-512 with VBMI, whose byte permutes look up a code's value without a gather) compute
// exactly what the scalar path computes, picked once by what the CPU supports. The AVX2 path of a
// finite block multiplies by 1 / maximum instead of dividing: the quotient and that product are at
// most 2 bit patterns apart, so their codes differ only where a threshold lies that near, and such
// a block is coded again with the division (code_table_x86.cpp).
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <vector>

namespace frugal::detail {

class CodeTable {
 public:
  /// `map`: 256 ascending fp32 codes (dynamic_map).
  explicit CodeTable(const torch::Tensor& map);

  /// The code of a value already divided by its block's maximum (any float: see sanitized()).
  uint8_t code_of(float y) const;
  /// Whether y (a finite value of [-1, 1] or just beyond) lies within kProductSlack bit patterns
  /// of its key's threshold field: then a neighbour's code may differ from y's (the AVX2 path).
  bool near_threshold(float y) const;
  /// What a scan of a block finds: its largest finite magnitude and whether a value is not finite.
  struct BlockMaximum {
    float finite_max = 0.0f;
    bool nonfinite = false;
  };

  /// Codes of x[i] / absmax (0 when absmax is 0), by the fastest path this CPU has.
  void quantize(const float* x, float absmax, uint8_t* out, int64_t len) const;
  /// A block's values quantized with their own maximum (finite_max), which is returned.
  float requantize(const float* x, int64_t len, uint8_t* out) const;
  /// The same with the block's maximum already found (a step's loop finds it as it writes the values).
  void quantize_block(const float* x, int64_t len, BlockMaximum top, uint8_t* out) const;
  /// out[i] = code value of codes[i] * scale.
  void dequantize(const uint8_t* codes, float scale, float* out, int64_t len) const;
  /// The scalar paths alone (tests compare them with the vector paths).
  void quantize_scalar(const float* x, float absmax, uint8_t* out, int64_t len) const;
  void dequantize_scalar(const uint8_t* codes, float scale, float* out, int64_t len) const;

  /// The largest finite |x[i]| (0 when none is): a block's maximum.
  static float finite_max(const float* x, int64_t len);

  const float* codes() const { return code_.data(); }
  /// Whether the map has negative codes (the signed map).
  bool is_signed() const { return code_[0] < 0.0f; }
  /// Which vector path quantize() and dequantize() take here: "avx512vbmi", "avx2" or "scalar".
  static const char* vector_path();

  // The key layout (see above); public for the vector paths.
  static constexpr uint32_t kLowest = 0x34000000u;   // 2^-23: smaller magnitudes share key 0
  static constexpr uint32_t kOne = 0x3F800000u;      // 1.0f
  static constexpr int kKeys = static_cast<int>(((kOne - kLowest) >> 16) + 1);  // per sign
  /// Per sign and key: bits 0-7 the count of thresholds below the key's first value, bits 8-24
  /// the threshold in the key as low 16 bits (flipped for negative values, so that one >= serves
  /// both signs); without one, 0x10000 or 0x10001 for a threshold just past the key's last value
  /// (never reached, but within kProductSlack of it), else 0x1ffff.
  const uint32_t* buckets() const { return bucket_.data(); }
  /// How far (in bit patterns) a product x * (1 / absmax) may lie from the quotient x / absmax.
  static constexpr uint32_t kProductSlack = 2;
  /// Whether every threshold within kProductSlack of a key shows in its field (so that
  /// near_threshold() finds every value whose code the product may change).
  bool product_path() const { return product_path_; }
  /// Byte b of every code value, as 4 tables of 256 bytes (the AVX-512 VBMI dequantize).
  const uint8_t* value_bytes() const { return value_bytes_.data(); }

 private:
  std::array<float, 256> code_{};
  std::vector<uint32_t> bucket_;
  bool product_path_ = true;
  std::array<uint8_t, 4 * 256> value_bytes_{};
};

}  // namespace frugal::detail
