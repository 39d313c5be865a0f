#pragma once
// What one micro-step looks like to the policies that hook into it. The Trainer fills it in
// as it goes through the numbered steps of Trainer::train_micro_step; policies read it and may
// change the two decisions it carries: whether this micro-step ends with an optimizer step
// (`boundary`, set before the forward pass) and whether that optimizer step is cancelled.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/base/communicator.hpp"
#include "frugal/base/snapshot.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/data/batch.hpp"

namespace frugal {

class StepContext {
 public:
  StepContext(const TrainerState& state, const Batch& batch, torch::nn::Module& module,
              torch::optim::Optimizer& optimizer, bool last_in_epoch)
      : state_(state), batch_(batch), module_(module), optimizer_(optimizer), last_in_epoch_(last_in_epoch) {}

  const TrainerState& state() const { return state_; }
  const Batch& batch() const { return batch_; }
  torch::nn::Module& module() const { return module_; }
  torch::optim::Optimizer& optimizer() const { return optimizer_; }
  /// Every parameter the optimizer updates, across its parameter groups.
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> params;
    for (const auto& group : optimizer_.param_groups()) params.insert(params.end(), group.params().begin(), group.params().end());
    return params;
  }
  /// This micro-batch is the last of its epoch.
  bool last_in_epoch() const { return last_in_epoch_; }

  /// Whether this micro-step ends with gradient reduction and an optimizer step. True unless a
  /// policy (gradient accumulation) clears it in on_step_begin.
  bool boundary() const { return boundary_; }
  void set_boundary(bool boundary) { boundary_ = boundary; }

  /// The loss as the user's code returned it (detached), before any transform.
  const torch::Tensor& loss() const { return loss_; }
  void set_loss(torch::Tensor loss) { loss_ = std::move(loss); }

  /// This optimizer step's loss so far: the sum in fp32 over its micro-steps up to this one
  /// (defined from the forward pass on), and how many it sums. One tensor per optimizer step,
  /// shared by the Trainer's log window and the policies: read it, never change it in place.
  const torch::Tensor& step_loss_sum() const { return step_loss_sum_; }
  int64_t step_micro_steps() const { return step_micro_steps_; }
  void set_step_loss(torch::Tensor sum, int64_t micro_steps) {
    step_loss_sum_ = std::move(sum);
    step_micro_steps_ = micro_steps;
  }

  /// Cancels this boundary's optimizer step (e.g. inf/nan gradients). The first reason wins.
  void cancel_step(std::string reason) {
    if (!cancel_reason_) cancel_reason_ = std::move(reason);
  }
  bool step_cancelled() const { return cancel_reason_.has_value(); }
  const std::optional<std::string>& cancel_reason() const { return cancel_reason_; }

  /// Keeps this optimizer step's loss out of the logged training loss (a non-finite loss the
  /// step was cancelled for, which would otherwise turn the whole log window into nan).
  void discard_loss() { discard_loss_ = true; }
  bool loss_discarded() const { return discard_loss_; }

  /// Asks the Trainer to go back to `to` (a snapshot of this run) once this micro-step is over,
  /// and to continue reading data at `resume_at` rather than where the snapshot was taken.
  struct Rollback {
    std::shared_ptr<const TrainingSnapshot> to;
    DataPosition resume_at;
  };
  void roll_back(std::shared_ptr<const TrainingSnapshot> to, DataPosition resume_at) {
    rollback_ = Rollback{std::move(to), resume_at};
  }
  const std::optional<Rollback>& rollback() const { return rollback_; }

  /// Sharded data parallelism (set in reduce_gradients): the gradients of parameters() are this
  /// rank's part of the model's, so a figure of the whole model (the global norm, an overflow
  /// anywhere) is the reduction over the ranks of each rank's partial figure.
  void set_gradient_shards(Communicator* ranks) { shard_ranks_ = ranks; }
  bool gradients_sharded() const { return shard_ranks_ != nullptr; }
  /// The sum (or the maximum) of `partial` over the ranks sharing the gradients: one collective
  /// on every rank alike. `partial` itself when the gradients are whole on each rank.
  torch::Tensor reduce_over_shards(torch::Tensor partial, ReduceOp op = ReduceOp::sum) const {
    if (!shard_ranks_) return partial;
    std::vector<torch::Tensor> values{partial.detach().reshape({-1}).clone()};
    shard_ranks_->all_reduce(values, op);
    return values[0].view(partial.sizes());
  }

 private:
  const TrainerState& state_;
  const Batch& batch_;
  torch::nn::Module& module_;
  torch::optim::Optimizer& optimizer_;
  bool last_in_epoch_;
  bool boundary_ = true;
  torch::Tensor loss_;
  torch::Tensor step_loss_sum_;
  int64_t step_micro_steps_ = 0;
  std::optional<std::string> cancel_reason_;
  bool discard_loss_ = false;
  std::optional<Rollback> rollback_;
  Communicator* shard_ranks_ = nullptr;
};

}  // namespace frugal
