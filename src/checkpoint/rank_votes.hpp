#pragma once
// How the ranks of a checkpointing run agree: one small collective each, on the training device
// (NCCL reduces only CUDA tensors); with one process, the local values.

#include <cstdint>
#include <vector>

namespace frugal {
class TrainingRun;
}

namespace frugal::detail {

/// The largest of each value across ranks.
std::vector<int64_t> max_across_ranks(const TrainingRun& run, const std::vector<int64_t>& values);
/// True if `local` is true on any rank.
bool any_rank(const TrainingRun& run, bool local);

}  // namespace frugal::detail
