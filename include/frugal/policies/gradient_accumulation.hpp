#pragma once
// Gradient accumulation: a large effective batch from small micro-batches. Each micro-batch's
// loss is divided by N and the optimizer steps every N micro-batches; the other micro-steps are
// not boundaries, so gradient reduction (data parallel), unscaling, clipping and the step are
// skipped on them by the Trainer's sequence.
//
// End of epoch: windows never span epochs. At an epoch's last micro-batch a partial window of
// k < N micro-batches steps with what it has, each micro-batch still weighted 1/N (as
// PyTorch Lightning does); use drop_last or a dataset size divisible by N x batch to avoid it.
//
//   trainer.add_policy(std::make_shared<frugal::GradientAccumulationPolicy>(
//       frugal::GradientAccumulationOptions().effective_batch_size(64)));  // 8 x 8 with batch 8

#include <torch/arg.h>

#include <string>

#include "frugal/core/policy.hpp"

namespace frugal {

struct GradientAccumulationOptions {
  /// Micro-batches per optimizer step.
  TORCH_ARG(int64_t, steps) = 1;
  /// If > 0: derive `steps` so that steps x micro-batch x replicas equals this (must divide).
  TORCH_ARG(int64_t, effective_batch_size) = 0;
  /// On an out-of-memory error in a step (trainer.halve_batch_on_oom): every rank drops the
  /// window, halves the micro-batch, doubles the steps and runs the window again.
  TORCH_ARG(bool, halve_batch_on_oom) = false;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

class GradientAccumulationPolicy : public Policy {
 public:
  explicit GradientAccumulationPolicy(GradientAccumulationOptions options = {});
  std::string name() const override { return "gradient_accumulation"; }
  PolicyPhase phase() const override { return PolicyPhase::batching; }

  void on_fit_begin(const TrainingRun& run) override;
  void on_step_begin(StepContext& ctx) override;
  torch::Tensor transform_loss(StepContext& ctx, torch::Tensor loss) override;
  void save_state(StateDict& state) const override;
  void load_state(const StateDict& state) override;

  /// Micro-batches per optimizer step in effect.
  int64_t steps() const { return steps_; }

 private:
  /// The micro-batch changed (halved, or so restored): the same effective batch from now on.
  void keep_effective_batch(int64_t old_size, int64_t new_size);

  GradientAccumulationOptions options_;
  int64_t replicas_ = 1;
  int64_t steps_;
  int64_t in_window_ = 0;  // micro-batches of the current window already run
};

/// steps x micro_batch x replicas == effective_batch, or OptionError explaining why not.
int64_t accumulation_steps_for(int64_t effective_batch, int64_t micro_batch, int64_t replicas);

}  // namespace frugal
