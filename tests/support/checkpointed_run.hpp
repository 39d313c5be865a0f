#pragma once
// The checkpoint tests' run: a TinyNet from a seed of its own, AdamW on blobs, checkpointed, to be
// started, stopped and resumed. Every run may start from other random weights: a resume must
// overwrite them all.

#include <filesystem>
#include <memory>

#include "support/fixtures.hpp"

namespace frugal::testing {

struct CheckpointedRun {
  TinyNet net;
  std::unique_ptr<Trainer> trainer;
  std::shared_ptr<CheckpointPolicy> checkpoint;
};

struct CheckpointedRunOptions {
  TORCH_ARG(uint64_t, init_seed) = 1;  // the initial weights
  TORCH_ARG(int64_t, hidden) = 16;
  TORCH_ARG(int64_t, examples) = 96;   // of blobs()
  TORCH_ARG(DataLoaderOptions, data) = DataLoaderOptions().batch_size(8).seed(5);
};

/// `trainer` options (device, run_dir, steps) and `checkpoint` options as the test needs them.
inline CheckpointedRun checkpointed_run(const TrainerOptions& trainer, const CheckpointOptions& checkpoint,
                                        const CheckpointedRunOptions& o = {}) {
  torch::manual_seed(o.init_seed());
  CheckpointedRun r{TinyNet(4, o.hidden(), 3), nullptr, nullptr};
  r.trainer = std::make_unique<Trainer>(
      Model(r.net.ptr(), cross_entropy(), accuracy_and_loss()),
      [](torch::nn::Module& m) { return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(0.01)); },
      blobs(o.examples()), trainer, o.data());
  r.checkpoint = std::make_shared<CheckpointPolicy>(checkpoint);
  add_checkpointing(*r.trainer, r.checkpoint);
  return r;
}

/// The state a resume must restore exactly besides weights and moments: an LR schedule, gradient
/// accumulation over 2 micro-batches and fp16 loss scaling that grows every 3 steps. The precision
/// policy, for its scaler.
inline std::shared_ptr<MixedPrecisionPolicy> add_stateful_policies(CheckpointedRun& r) {
  r.trainer->set_lr_schedule(lr::linear_warmup_decay(3, 20));
  r.trainer->add_policy(std::make_shared<GradientAccumulationPolicy>(GradientAccumulationOptions().steps(2)));
  auto precision = std::make_shared<MixedPrecisionPolicy>(
      MixedPrecisionOptions().mode(Precision::fp16).autocast(false).scaler(GradScalerOptions().growth_interval(3)));
  r.trainer->add_policy(precision);
  return precision;
}

}  // namespace frugal::testing
