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

/// The message of a run stopped by `what` (a non-finite loss or weights) at `at`, naming the last
/// good checkpoint and what to try.
std::string nonfinite_stop_message(const std::string& what, const std::string& at, const std::string& last_checkpoint);

}  // namespace frugal::detail
