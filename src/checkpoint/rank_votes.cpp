#include "checkpoint/rank_votes.hpp"

#include <torch/torch.h>

#include "frugal/base/communicator.hpp"
#include "frugal/core/training_run.hpp"

namespace frugal::detail {

std::vector<int64_t> max_across_ranks(const TrainingRun& run, const std::vector<int64_t>& values) {
  if (run.world_size() == 1) return values;
  std::vector<torch::Tensor> t{torch::tensor(values, torch::kLong).to(run.device())};
  run.communicator().all_reduce(t, ReduceOp::max);
  const torch::Tensor host = t[0].cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

bool any_rank(const TrainingRun& run, bool local) { return run.world_size() > 1 ? run.communicator().any(local) : local; }

}  // namespace frugal::detail
