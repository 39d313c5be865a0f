#pragma once
// What one micro-step looks like to the policies that hook into it. The Trainer fills it in
// as it goes through the numbered steps of Trainer::train_micro_step. Policies read it, publish
// facts on it for each other (the precision in effect, the gradient norm), and take decisions:
// whether this micro-step ends with an optimizer step (`boundary`, set before the forward pass),
// whether that step is cancelled, a rollback, and standing decisions the Trainer keeps from step
// to step (the learning-rate factor, a precision to switch to).

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/base/communicator.hpp"
#include "frugal/base/precision.hpp"
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
  /// The first micro-step of an epoch, or of the rest of one after a resume.
  bool first_in_epoch() const { return first_in_epoch_; }
  void set_first_in_epoch(bool first) { first_in_epoch_ = first; }
  /// The micro-batch changed since the previous micro-step: halved after running out of memory,
  /// or set so by a resumed checkpoint (gradient accumulation keeps the effective batch).
  struct MicroBatchChange {
    int64_t from = 0, to = 0;
  };
  const std::optional<MicroBatchChange>& micro_batch_change() const { return micro_batch_change_; }
  void set_micro_batch_change(std::optional<MicroBatchChange> change) { micro_batch_change_ = change; }

  // -- Facts policies publish for each other ---------------------------------------------
  /// The precision this step's forward pass runs in (published by mixed precision in
  /// on_step_begin); unset without a precision policy, which means fp32.
  const std::optional<Precision>& precision() const { return precision_; }
  void set_precision(Precision precision) { precision_ = precision; }
  /// The whole model's gradient norm at this boundary, when a policy computed it (clipping by
  /// norm, in clip_gradients); undefined otherwise. A 0-dim tensor on the device.
  const torch::Tensor& gradient_norm() const { return gradient_norm_; }
  void set_gradient_norm(torch::Tensor norm) { gradient_norm_ = std::move(norm); }

  // -- Standing decisions: kept by the Trainer from step to step, across rollbacks, and in
  // snapshots, until changed ------------------------------------------------------------------
  struct Standing {
    /// Multiplies the learning rate: the Trainer sets each group's rate to base x schedule x
    /// this after every optimizer step and on resume. Equal on every rank.
    double lr_factor = 1.0;
    /// A precision the run continues in from the next step on, and why (the recovery ladder).
    std::optional<Precision> precision;
    std::string precision_reason;
  };
  const Standing& standing() const { return standing_; }
  void set_standing(Standing standing) { standing_ = std::move(standing); }
  /// The learning-rate multiplier from the next optimizer step on (the recovery ladder lowers it).
  void set_lr_factor(double factor) { standing_.lr_factor = factor; }
  /// Asks the precision policy to continue in `precision` from the next step on (also after a
  /// rollback restores its older state).
  void request_precision(Precision precision, std::string reason) {
    standing_.precision = precision;
    standing_.precision_reason = std::move(reason);
  }

  /// Out of memory in this accumulation window does not end the run: every rank drops the
  /// window and runs it again with half the micro-batch. Set in on_step_begin by the policy that
  /// keeps the effective batch when the micro-batch changes (gradient accumulation).
  void retry_window_on_out_of_memory() { retry_window_on_oom_ = true; }
  bool retries_window_on_out_of_memory() const { return retry_window_on_oom_; }

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
  bool first_in_epoch_ = false;
  std::optional<MicroBatchChange> micro_batch_change_;
  std::optional<Precision> precision_;
  torch::Tensor gradient_norm_;
  Standing standing_;
  bool retry_window_on_oom_ = false;
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
