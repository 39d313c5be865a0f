#pragma once
// Data-parallel training: every rank holds the whole model, trains on its own share of each
// epoch, and averages gradients with the others before each optimizer step, as PyTorch's
// DistributedDataParallel does. Parameters and buffers start from rank 0's. Gradients travel in
// buckets of about bucket_cap_mb, each bucket's all-reduce launched during backward as soon as
// its last gradient is ready, so communication overlaps the rest of the backward pass; micro-
// steps of gradient accumulation that end without an optimizer step communicate nothing.
// Because the overflow check of fp16 training and clipping run on the averaged gradients, every
// rank takes the same skip/step decision. Buffers (BatchNorm running statistics) are made equal
// at each optimizer step: rank 0's are broadcast, or all are averaged.
//
// Sharding (ZeRO stage 1 and 2, shard = optimizer | gradients; optimizer_shards.hpp): each rank
// keeps optimizer state only for its chunk of every bucket and steps only that; the updated
// parameters are then all-gathered. With `gradients` the buckets are reduce-scattered instead of
// all-reduced and each rank keeps only its chunk of the averaged gradients (the full-size .grad
// is released as soon as it is in its bucket). Whole-model decisions stay the same on every rank:
// the clipping norm and the fp16 overflow check are reduced over the ranks (StepContext).
//
//   auto comm = frugal::connect(frugal::detect_world(frugal::process_environment()));
//   frugal::add_data_parallel(trainer, std::make_shared<frugal::DataParallelPolicy>(comm));
//   trainer.fit();   // launched with: torchrun --nproc-per-node=8 --no-python ./train

#include <torch/arg.h>

#include <memory>
#include <string>

#include "frugal/base/enum_names.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/distributed/communicator.hpp"
#include "frugal/distributed/optimizer_shards.hpp"

namespace frugal {

namespace detail {
class GradientBuckets;
}

/// What keeps buffers (BatchNorm running mean/var) equal across ranks.
enum class BufferSync { broadcast, average, off };
constexpr std::array<EnumName<BufferSync>, 3> names_of(BufferSync) {
  return {{{BufferSync::broadcast, "broadcast"}, {BufferSync::average, "average"}, {BufferSync::off, "off"}}};
}

/// What each rank keeps of the optimizer state and of the reduced gradients.
enum class ShardMode { off, optimizer, gradients };
constexpr std::array<EnumName<ShardMode>, 3> names_of(ShardMode) {
  return {{{ShardMode::off, "off"}, {ShardMode::optimizer, "optimizer"}, {ShardMode::gradients, "gradients"}}};
}

struct DataParallelOptions {
  /// Gradient bytes per all-reduce.
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  /// Launch each bucket during backward; off: all at once after backward (for measuring overlap).
  TORCH_ARG(bool, overlap) = true;
  /// broadcast: rank 0's buffers, as DistributedDataParallel; average: the mean over ranks.
  TORCH_ARG(BufferSync, buffers) = BufferSync::broadcast;
  /// Log at info level on every rank; by default ranks other than 0 log warnings and errors only.
  TORCH_ARG(bool, log_all_ranks) = false;
  /// off: every rank holds all optimizer state and gradients; optimizer: 1/N of the optimizer
  /// state (ZeRO-1); gradients: also 1/N of the reduced gradients (ZeRO-2).
  TORCH_ARG(ShardMode, shard) = ShardMode::off;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

class DataParallelPolicy : public Policy {
 public:
  explicit DataParallelPolicy(std::shared_ptr<Communicator> communicator, DataParallelOptions options = {});
  ~DataParallelPolicy() override;
  std::string name() const override { return "data_parallel"; }
  PolicyPhase phase() const override { return PolicyPhase::communication; }
  /// What the Trainer replicates with: the communicator, the optimizer shards (with sharding)
  /// and the buckets' gradient storage.
  Replication replication() const;

  void on_fit_begin(const TrainingRun& run) override;
  void on_fit_end(const TrainingRun& run) override;
  torch::Tensor transform_loss(StepContext& ctx, torch::Tensor loss) override;
  void reduce_gradients(StepContext& ctx) override;
  void on_after_optimizer_step(StepContext& ctx) override;

  /// Buckets the gradients travel in (known once the fit began).
  int64_t bucket_count() const;
  const DataParallelOptions& options() const { return options_; }

 private:
  int64_t cap_bytes() const;
  void check_replicas_agree(const TrainingRun& run) const;
  void sync_buffers(torch::nn::Module& module);

  std::shared_ptr<Communicator> communicator_;
  DataParallelOptions options_;
  std::shared_ptr<OptimizerShards> shards_;  // with sharding
  std::unique_ptr<detail::GradientBuckets> buckets_;
};

/// Adds `data_parallel` to `trainer` as a policy and hands the Trainer its replication: this
/// process then reads its rank's share of the data.
void add_data_parallel(Trainer& trainer, std::shared_ptr<DataParallelPolicy> data_parallel);

}  // namespace frugal
