#pragma once
// A policy is one efficiency feature (mixed precision, accumulation, checkpointing, early
// stopping, the smoke test...) expressed as hooks into the Trainer's step sequence. Every hook
// has a no-op default, so a policy overrides only the points it needs; policies never copy the
// sequence itself. Within one hook point, policies run in the order they were added.
//
// Order of the hooks in one micro-step (Trainer::train_micro_step):
//   on_step_begin -> forward_guard (forward + loss run inside) -> transform_loss -> backward
//   -> on_after_backward -> [boundary only: reduce_gradients -> unscale_gradients -> clip_gradients
//   -> before_optimizer_step -> optimizer step + LR schedule unless cancelled -> on_after_optimizer_step]
//   -> on_step_end -> [a rollback a policy asked for (StepContext::roll_back)]
// Once a step is cancelled, the remaining gradient hooks (unscale, clip, before_optimizer_step)
// are not called; on_after_optimizer_step always is, with ctx.step_cancelled() telling.
//
//   struct CountSteps : frugal::Policy {
//     std::string name() const override { return "count_steps"; }
//     void on_after_optimizer_step(frugal::StepContext& ctx) override { if (!ctx.step_cancelled()) ++n; }
//     int n = 0;
//   };

#include <torch/types.h>

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "frugal/base/forward_guard.hpp"
#include "frugal/base/snapshot.hpp"
#include "frugal/base/state_dict.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/core/step_context.hpp"

namespace frugal {

class Communicator;
class OptimizerShards;
class Trainer;

/// Phase in which a forward pass runs.
enum class Phase { train, validate };
inline std::ostream& operator<<(std::ostream& out, Phase phase) {
  return out << (phase == Phase::train ? "train" : "validate");
}

class Policy {
 public:
  virtual ~Policy() = default;
  /// Unique within a Trainer; prefixes the policy's saved state.
  virtual std::string name() const = 0;

  // -- Fit and epoch ------------------------------------------------------------------
  /// Before anything else in fit(): a snapshot to continue from (a checkpoint), or nullptr.
  /// The first policy to return one wins.
  virtual std::shared_ptr<const TrainingSnapshot> resume_from(const Trainer& /*trainer*/) { return nullptr; }
  /// The snapshot resume_from gave could not be restored (on some rank; `reason` says why): the
  /// Trainer then asks resume_from again, for an older one.
  virtual void resume_failed(const std::string& /*reason*/) {}
  /// Before the first step. May throw to stop the fit before it starts (the smoke test does).
  virtual void on_fit_begin(const Trainer& /*trainer*/) {}
  virtual void on_fit_end(const Trainer& /*trainer*/) {}
  virtual void on_epoch_begin(const TrainerState& /*state*/) {}
  virtual void on_epoch_end(const TrainerState& /*state*/) {}

  // -- One micro-step, in this order -----------------------------------------------------
  /// 1. May clear ctx.set_boundary() (gradient accumulation).
  virtual void on_step_begin(StepContext& /*ctx*/) {}
  /// 2. A scope held open around the forward pass and loss, or nullptr.
  virtual std::unique_ptr<ForwardGuard> forward_guard(const TrainerState& /*state*/, Phase /*phase*/) {
    return nullptr;
  }
  /// 3. Rewrites the loss before backward (loss scaling, 1/N for accumulation).
  virtual torch::Tensor transform_loss(StepContext& /*ctx*/, torch::Tensor loss) { return loss; }
  /// 4. After backward, on every micro-step.
  virtual void on_after_backward(StepContext& /*ctx*/) {}
  /// 5. Boundary only: average gradients across replicas.
  virtual void reduce_gradients(StepContext& /*ctx*/) {}
  /// 6. Boundary only: unscale gradients and check them for inf/nan; may cancel the step.
  virtual void unscale_gradients(StepContext& /*ctx*/) {}
  /// 7. Boundary only, on unscaled and reduced gradients: clip.
  virtual void clip_gradients(StepContext& /*ctx*/) {}
  /// 8. Boundary only: last chance to cancel the optimizer step.
  virtual void before_optimizer_step(StepContext& /*ctx*/) {}
  /// 9. Boundary only, after the optimizer step was taken or cancelled.
  virtual void on_after_optimizer_step(StepContext& /*ctx*/) {}
  /// 10. Every micro-step, after the Trainer's bookkeeping (counters, logging, validation).
  virtual void on_step_end(StepContext& /*ctx*/) {}

  /// The Trainer went back to an earlier snapshot of this run (a policy's StepContext::roll_back)
  /// and now stands at `state`: checkpoints of the abandoned path must not win a resume.
  virtual void on_rolled_back(const TrainerState& /*state*/) {}

  // -- Validation and stopping -----------------------------------------------------------
  virtual void on_validation_end(const TrainerState& /*state*/, const Metrics& /*metrics*/) {}
  /// Asked after every optimizer step and every validation, of every policy (each is asked,
  /// so a policy may use collectives here); the first reason ends the fit on all ranks.
  virtual std::optional<std::string> should_stop(const TrainerState& /*state*/) { return std::nullopt; }

  /// A multiplier of the learning rate at this point (the recovery ladder lowers it for a while):
  /// the Trainer sets each group's rate to base x schedule x the product over policies after
  /// every optimizer step and on resume. Must be equal on every rank.
  virtual double lr_factor(const TrainerState& /*state*/) const { return 1.0; }

  /// At each training log line: figures to record with it (loss scale, gradient norm...).
  /// Called only every log_every_n_steps, so it may read values back from the device.
  virtual void collect_metrics(Metrics& /*metrics*/) {}

  /// The Trainer changed the micro-batch from `old_size` to `new_size` (halved after running out
  /// of memory, or restored so from a checkpoint): gradient accumulation keeps the effective batch.
  virtual void on_micro_batch_changed(const Trainer& /*trainer*/, int64_t /*old_size*/, int64_t /*new_size*/) {}

  // -- Replication ------------------------------------------------------------------------
  /// The policy that replicates training across processes (DataParallelPolicy) returns its
  /// communicator. The Trainer then reads this rank's share of the data, averages logged and
  /// validation figures across ranks, writes logs and metrics on rank 0 only, and takes every
  /// stop decision on all ranks alike. At most one policy may return one.
  virtual std::shared_ptr<Communicator> communicator() const { return nullptr; }
  /// The policy that shards the optimizer state across ranks (DataParallelPolicy with shard =
  /// optimizer or gradients) returns its shards. The Trainer attaches them to its optimizer when
  /// the policy is added (before any state exists), and snapshots and restores through them.
  virtual std::shared_ptr<OptimizerShards> optimizer_shards() const { return nullptr; }
  /// Gradient storage the policy holds besides the parameters' .grad (data-parallel buckets),
  /// counted in the memory report.
  virtual std::vector<torch::Tensor> held_gradients() const { return {}; }

  // -- State that must survive a resume --------------------------------------------------
  /// The newest complete checkpoint this policy wrote or resumed from, for error messages that
  /// say where a restart would begin (a checkpointing policy answers).
  virtual std::optional<std::string> last_checkpoint() const { return std::nullopt; }
  virtual void save_state(StateDict& /*state*/) const {}
  virtual void load_state(const StateDict& /*state*/) {}
};

}  // namespace frugal
