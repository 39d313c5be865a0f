#pragma once
// Whether weights are finite, in one fast pass: a sum is finite only if every element is (an inf
// or a NaN makes it inf or NaN), and it writes no mask, so it costs a tenth of
// isfinite().all(). A non-finite sum may also be an overflow of large finite weights: only those
// tensors are checked element by element.

#include <torch/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace frugal::detail {

/// The name of the first tensor of `named` holding an inf or a NaN; nullopt when all are finite.
std::optional<std::string> first_nonfinite(const std::vector<std::pair<std::string, torch::Tensor>>& named);

/// What an error about non-finite weights or losses advises.
constexpr const char* kNonFiniteAdvice =
    ". Lower the learning rate, check the data, or use bf16/fp16 loss scaling; trainer.stop_on_nonfinite_loss=false trains on regardless";

}  // namespace frugal::detail
