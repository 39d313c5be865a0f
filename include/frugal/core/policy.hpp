#pragma once
// A policy is one efficiency feature (mixed precision, accumulation, checkpointing, early
// stopping, the smoke test...) expressed as hooks into the Trainer's step sequence. Every hook
// has a no-op default, so a policy overrides only the points it needs; policies never copy the
// sequence itself. Within one hook point, policies run in the order they were added. A policy
// sees the run through `TrainingRun` and the step through `StepContext`; it learns what other policies
// did from the facts they publish there (the precision in effect, the gradient norm), never by
// looking for them. Services are handed to the Trainer, not offered by policies: a resume
// source (Trainer::set_resume_source) and replication (Trainer::replicate).
//
// Order of the hooks in one micro-step (Trainer::train_micro_step):
//   on_step_begin -> forward_guard (forward + loss run inside) -> transform_loss -> backward
//   -> [boundary only: reduce_gradients -> unscale_gradients -> clip_gradients
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

#include <array>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "frugal/base/enum_names.hpp"
#include "frugal/base/forward_guard.hpp"
#include "frugal/base/metrics.hpp"
#include "frugal/base/state_dict.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/core/step_context.hpp"

namespace frugal {

/// Phase in which a forward pass runs.
enum class Phase { train, validate };
inline std::ostream& operator<<(std::ostream& out, Phase phase) {
  return out << (phase == Phase::train ? "train" : "validate");
}

/// Where a policy sits in the Trainer's order. Every hook calls the policies in this order (in
/// the order added within a phase); Trainer::add_policy places each policy by its phase, so the
/// order never depends on the order of add_policy calls. docs/design.md shows it.
enum class PolicyPhase {
  preflight,      // the smoke test: its on_fit_begin runs before any other policy's state matters
  environment,    // the process around the step: CPU threads
  communication,  // data parallelism: gradients are reduced before any later policy reads them
  batching,       // gradient accumulation: the loss divided before precision scales it
  precision,      // autocast and the loss scaler: gradients unscaled for what follows
  gradients,      // clipping, on unscaled (and reduced) gradients
  observation,    // throughput, memory, cost, profiler, progress: measure the step as it was
  stopping,       // early stopping, on the step's validation
  persistence,    // checkpoints: the step and every decision above are saved
  recovery,       // the recovery ladder: it judges the finished step and may roll it all back
  custom,         // a policy that names no phase: after Frugal's own, as if added last
};
constexpr std::array<EnumName<PolicyPhase>, 11> names_of(PolicyPhase) {
  return {{{PolicyPhase::preflight, "preflight"},
           {PolicyPhase::environment, "environment"},
           {PolicyPhase::communication, "communication"},
           {PolicyPhase::batching, "batching"},
           {PolicyPhase::precision, "precision"},
           {PolicyPhase::gradients, "gradients"},
           {PolicyPhase::observation, "observation"},
           {PolicyPhase::stopping, "stopping"},
           {PolicyPhase::persistence, "persistence"},
           {PolicyPhase::recovery, "recovery"},
           {PolicyPhase::custom, "custom"}}};
}

class Policy {
 public:
  virtual ~Policy() = default;
  /// Unique within a Trainer; prefixes the policy's saved state.
  virtual std::string name() const = 0;
  /// Where it goes in the Trainer's order of policies.
  virtual PolicyPhase phase() const { return PolicyPhase::custom; }

  // -- Fit and epoch ------------------------------------------------------------------
  /// Before the first step, after a resume. May throw to stop the fit before it starts (the
  /// smoke test does).
  virtual void on_fit_begin(const TrainingRun& /*run*/) {}
  virtual void on_fit_end(const TrainingRun& /*run*/) {}
  /// After the epoch's last step and its validation. (An epoch's first step says so itself:
  /// StepContext::first_in_epoch.)
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
  /// 4. (backward) 5. Boundary only: average gradients across replicas.
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

  // -- Validation, stopping, logging -------------------------------------------------------
  virtual void on_validation_end(const TrainerState& /*state*/, const Metrics& /*metrics*/) {}
  /// Asked after every optimizer step and every validation, of every policy (each is asked,
  /// so a policy may use collectives here); the first reason ends the fit on all ranks.
  virtual std::optional<std::string> should_stop(const TrainerState& /*state*/) { return std::nullopt; }
  /// At each training log line: figures to record with it (loss scale, gradient norm...).
  /// Called only every log_every_n_steps, so it may read values back from the device.
  virtual void collect_metrics(Metrics& /*metrics*/) {}

  // -- State that must survive a resume --------------------------------------------------
  virtual void save_state(StateDict& /*state*/) const {}
  virtual void load_state(const StateDict& /*state*/) {}
};

}  // namespace frugal
