#include "frugal/policies/data_parallel.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "distributed/gradient_buckets.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"

namespace frugal {

void DataParallelOptions::validate() const {
  if (!(bucket_cap_mb() > 0)) throw OptionError("bucket_cap_mb", c10::str("bucket_cap_mb must be > 0, got ", bucket_cap_mb()));
}

DataParallelPolicy::DataParallelPolicy(std::shared_ptr<Communicator> communicator, DataParallelOptions options)
    : communicator_(std::move(communicator)), options_(std::move(options)) {
  if (!communicator_) throw OptionError("communicator", "DataParallelPolicy: the communicator is null");
  options_.validate();
  if (options_.shard() != ShardMode::off) {
    shards_ = std::make_shared<OptimizerShards>(communicator_->world_size(), communicator_->rank(), cap_bytes());
  }
}

int64_t DataParallelPolicy::cap_bytes() const { return static_cast<int64_t>(options_.bucket_cap_mb() * 1024.0 * 1024.0); }

Replication DataParallelPolicy::replication() const {
  return {communicator_, shards_, [this] { return buckets_ ? buckets_->held() : std::vector<torch::Tensor>{}; }};
}

void add_data_parallel(Trainer& trainer, std::shared_ptr<DataParallelPolicy> data_parallel) {
  if (!data_parallel) throw OptionError("data_parallel", "add_data_parallel: the policy is null");
  trainer.replicate(data_parallel->replication());
  trainer.add_policy(std::move(data_parallel));
}

DataParallelPolicy::~DataParallelPolicy() = default;

int64_t DataParallelPolicy::bucket_count() const { return buckets_ ? buckets_->size() : 0; }

void DataParallelPolicy::on_fit_begin(const TrainingRun& run) {
  // Added with add_policy alone, the Trainer would train on all the data as one process.
  if (run.world_size() != communicator_->world_size() || run.rank() != communicator_->rank()) {
    throw OptionError("data_parallel", "DataParallelPolicy was added without handing the Trainer its ranks: "
                                       "add it with add_data_parallel(trainer, policy)");
  }
  if (communicator_->rank() != 0 && !options_.log_all_ranks() && log::level() < log::Level::warn) {
    log::set_level(log::Level::warn);
  }
  check_replicas_agree(run);
  torch::nn::Module& module = run.model().module();
  {
    // Every rank starts from rank 0's weights and buffers (a resumed run: all read one checkpoint).
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> state;
    for (const auto& p : module.parameters()) state.push_back(p.detach());
    for (const auto& b : module.buffers()) state.push_back(b.detach());
    communicator_->broadcast(state, 0);
  }
  std::vector<torch::Tensor> trained;
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) trained.push_back(p);
  }
  if (shards_ && !shards_->attached()) {
    throw TrainingError("DataParallelPolicy: sharding needs the Trainer to attach the shards (add the policy with add_data_parallel)");
  }
  const detail::BucketReduction reduction = options_.shard() == ShardMode::gradients ? detail::BucketReduction::scattered
                                            : options_.shard() == ShardMode::optimizer ? detail::BucketReduction::in_buckets
                                                                                       : detail::BucketReduction::into_grads;
  buckets_ = std::make_unique<detail::GradientBuckets>(std::move(trained), cap_bytes(), *communicator_, options_.overlap(), reduction,
                                                       shards_ ? shards_->element_alignment() : 1);
  log::info(c10::str("data parallel: rank ", communicator_->rank(), " of ", communicator_->world_size(), " (",
                     communicator_->backend(), "), gradients in ", buckets_->size(), " bucket(s) of up to ",
                     options_.bucket_cap_mb(), " MB", options_.overlap() ? ", overlapped with backward" : "",
                     shards_ ? c10::str(", sharded (", to_string(options_.shard()), "): this rank updates ", shards_->owned_elements(),
                                        " of ", shards_->total_elements(), " parameter elements")
                             : ""));
}

void DataParallelPolicy::check_replicas_agree(const TrainingRun& run) const {
  // Ranks that differ here would deadlock or silently diverge later: fail now, saying which.
  const torch::nn::Module& module = run.model().module();
  int64_t numel = 0;
  for (const auto& p : module.parameters()) numel += p.numel();
  const TrainerState& s = run.state();
  const std::vector<std::pair<std::string, int64_t>> facts{
      {"parameter tensors", static_cast<int64_t>(module.parameters().size())},
      {"parameter elements", numel},
      {"buffers", static_cast<int64_t>(module.buffers().size())},
      {"resumed step (do all ranks see the same checkpoint directory?)", s.step},
      {"resumed micro-step", s.micro_step},
      {"batches per epoch", run.batches_per_epoch()}};
  std::vector<int64_t> values;
  for (const auto& [name, value] : facts) values.push_back(value);
  for (const auto& [name, value] : facts) values.push_back(-value);
  std::vector<torch::Tensor> extremes{torch::tensor(values, torch::kLong).to(run.device())};
  communicator_->all_reduce(extremes, ReduceOp::max);
  const torch::Tensor host = extremes[0].cpu();
  const auto n = static_cast<int64_t>(facts.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t most = host[i].item<int64_t>(), least = -host[n + i].item<int64_t>();
    if (most != least) {
      throw TrainingError(c10::str("data parallel: the ranks disagree on ", facts[i].first, ": from ", least, " to ",
                                   most, " (rank ", communicator_->rank(), " has ", facts[i].second, ")"));
    }
  }
}

void DataParallelPolicy::on_fit_end(const TrainingRun&) { buckets_.reset(); }

torch::Tensor DataParallelPolicy::transform_loss(StepContext& ctx, torch::Tensor loss) {
  // Boundaries are settled by now (on_step_begin ran for every policy): only their backward
  // pass communicates.
  if (ctx.boundary() && buckets_) buckets_->arm();
  return loss;
}

void DataParallelPolicy::reduce_gradients(StepContext& ctx) {
  if (!buckets_) throw TrainingError("DataParallelPolicy: reduce_gradients before the fit began");
  buckets_->finish();
  if (shards_) {
    std::vector<torch::Tensor> reduced;
    for (int64_t b = 0; b < buckets_->size(); ++b) reduced.push_back(buckets_->reduced(static_cast<size_t>(b)));
    shards_->take_gradients(reduced, options_.shard() == ShardMode::gradients);
    shards_->refresh_pieces();
    ctx.set_gradient_shards(communicator_.get());
  }
  sync_buffers(ctx.module());
}

void DataParallelPolicy::on_after_optimizer_step(StepContext& ctx) {
  // Each rank stepped its pieces: every rank gets everyone's. A cancelled step changed nothing anywhere.
  if (shards_ && !ctx.step_cancelled()) shards_->gather_parameters(*communicator_);
}

void DataParallelPolicy::sync_buffers(torch::nn::Module& module) {
  if (options_.buffers() == BufferSync::off) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> broadcast, average;
  for (const auto& b : module.buffers()) {
    // Counters (BatchNorm's num_batches_tracked) are equal on every rank: averaging is for floats.
    (options_.buffers() == BufferSync::average && b.is_floating_point() ? average : broadcast).push_back(b.detach());
  }
  if (!broadcast.empty()) communicator_->broadcast(broadcast, 0);
  if (average.empty()) return;
  communicator_->all_reduce(average);
  for (auto& b : average) b.div_(static_cast<double>(communicator_->world_size()));
}

}  // namespace frugal
