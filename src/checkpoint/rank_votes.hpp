#pragma once
// How the ranks of a checkpointing run agree on several counts or flags at once: one
// TrainingRun::reduce_across_ranks; with one process, the local values. (One flag: run.any_rank.)

#include <cstdint>
#include <vector>

namespace frugal {
class TrainingRun;
}

namespace frugal::detail {

/// The largest of each value across ranks.
std::vector<int64_t> max_across_ranks(const TrainingRun& run, const std::vector<int64_t>& values);

}  // namespace frugal::detail
