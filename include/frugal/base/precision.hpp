#pragma once
// The floating-point formats a run computes or stores in: one enum for the training precision
// (MixedPrecisionPolicy) and a checkpoint's weight storage (CheckpointOptions::weights_dtype).

#include <torch/types.h>

#include <array>

#include "frugal/base/enum_names.hpp"

namespace frugal {

enum class Precision { fp32, fp16, bf16 };
constexpr std::array<EnumName<Precision>, 3> names_of(Precision) {
  return {{{Precision::fp32, "fp32"}, {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"}}};
}

/// The tensor type of a format: kFloat, kHalf, kBFloat16.
inline torch::ScalarType scalar_type_of(Precision precision) {
  return precision == Precision::fp16 ? torch::kHalf : precision == Precision::bf16 ? torch::kBFloat16 : torch::kFloat;
}

}  // namespace frugal
