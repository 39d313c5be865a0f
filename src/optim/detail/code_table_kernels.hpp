#pragma once
// The vector paths of CodeTable (code_table_x86.cpp): each handles a prefix of the values (whole
// vectors) and returns its length; the scalar path does the rest. Every path computes exactly
// what the scalar path computes.
#include <cstdint>

namespace frugal::detail {

class CodeTable;

struct VectorKernels {
  const char* name;
  /// `finite`: every x[i] is finite (then x[i] / absmax needs no clamping, and that work is skipped).
  int64_t (*quantize)(const CodeTable& table, const float* x, float absmax, bool finite, uint8_t* out, int64_t len);
  int64_t (*dequantize)(const CodeTable& table, const uint8_t* codes, float scale, float* out, int64_t len);
  /// Over a prefix: the largest finite |x[i]| (finite_magnitude; 0 when none), and whether any
  /// x[i] is not finite.
  int64_t (*scan)(const float* x, int64_t len, float* max, bool* nonfinite);
};

/// The best paths this CPU supports, chosen on first use.
const VectorKernels& vector_kernels();

}  // namespace frugal::detail
