#include "checkpoint/rank_votes.hpp"

#include <torch/torch.h>

#include "frugal/base/communicator.hpp"
#include "frugal/core/training_run.hpp"

namespace frugal::detail {

std::vector<int64_t> max_across_ranks(const TrainingRun& run, const std::vector<int64_t>& values) {
  if (run.world_size() == 1) return values;
  const torch::Tensor host = run.reduce_across_ranks(torch::tensor(values, torch::kLong), ReduceOp::max).cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

}  // namespace frugal::detail
