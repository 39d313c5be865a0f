#pragma once
// The loss-spike and NaN recovery ladder: a run that hits a spike or a non-finite loss at 3 a.m.
// recovers without a person, or stops with a good checkpoint and a report. At every optimizer
// step it reads the step's loss (averaged over the ranks) and the global gradient norm once,
// and calls the step an anomaly when either is non-finite, when the loss exceeds spike_factor x
// the running median of the last `window` clean steps, or when the norm exceeds max_grad_norm.
// Anomalies closer than repeat_window steps to each other climb one rung each:
//   1. skip the step (no optimizer update);
//   2. roll back to the oldest in-memory snapshot of a good step (PaLM's recipe) and skip the
//      batches read since it, plus skip_batches more;
//   3. roll back again, and multiply the learning rate by lr_factor for lr_window steps;
//   4. roll back again, and switch precision (fp16 -> bf16 -> fp32) for the rest of the run;
//   5. roll back once more and stop: the final checkpoint holds the good weights, and the fit
//      ends with a TrainingError that reports every decision.
// A rung that cannot act (no precision left to switch to) hands over to the next; with no
// rollback left (max_rollbacks) the ladder stops the run. Decisions use only figures that are equal on every rank, so every rank takes the same.
// It reads the gradient norm and the precision from StepContext (published by clipping and mixed
// precision) and acts through it: a cancelled step, a rollback, a standing learning-rate factor
// and precision request.
// The ladder's state and the skipped data positions are saved in checkpoints. fp16 steps whose
// gradients overflow are the loss scaler's to handle and never reach the ladder.
//
//   trainer.add_policy(std::make_shared<frugal::RecoveryPolicy>(
//       frugal::RecoveryOptions().spike_factor(3.0).snapshot_every_n_steps(50)));

#include <torch/arg.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/core/policy.hpp"

namespace frugal {

struct RecoveryOptions {
  /// Clean steps whose losses make the running median.
  TORCH_ARG(int64_t, window) = 50;
  /// Steps of history before spikes are judged at all (non-finite figures always are).
  TORCH_ARG(int64_t, min_history) = 10;
  /// A loss above this multiple of the running median is a spike; 0 = only non-finite losses.
  TORCH_ARG(double, spike_factor) = 3.0;
  /// A global gradient norm above this is an anomaly; 0 = only non-finite norms.
  TORCH_ARG(double, max_grad_norm) = 0.0;
  /// Also judge the global gradient norm at every step. Free when clipping by norm computes it
  /// (then always judged); otherwise one pass over the gradients, which catches a non-finite
  /// gradient before the update rather than at the next step's loss. max_grad_norm > 0 implies it.
  TORCH_ARG(bool, check_gradients) = false;
  /// An anomaly within this many steps of the previous one climbs a rung; later ones start over.
  TORCH_ARG(int64_t, repeat_window) = 50;
  /// Keep an in-memory snapshot of a good step every N steps (host memory: weights + optimizer).
  TORCH_ARG(int64_t, snapshot_every_n_steps) = 50;
  /// Snapshots kept; a rollback goes to the oldest (snapshots x every_n steps back at most).
  TORCH_ARG(int64_t, snapshots) = 2;
  /// Batches skipped after the anomaly, besides those read between the snapshot and it.
  TORCH_ARG(int64_t, skip_batches) = 0;
  /// Rung 3: learning-rate multiplier, and for how many steps.
  TORCH_ARG(double, lr_factor) = 0.5;
  TORCH_ARG(int64_t, lr_window) = 100;
  /// Rung 4 may switch precision.
  TORCH_ARG(bool, switch_precision) = true;
  /// Rollbacks allowed in one run (a resumed run counts on); past it the ladder stops the run.
  TORCH_ARG(int64_t, max_rollbacks) = 5;

 public:  // TORCH_ARG leaves the struct in private:
  /// Throws OptionError naming the bad field and value.
  void validate() const;
};

/// One range of training data a rollback skipped: from (epoch, batch) to before (epoch, batch),
/// in this rank's batches.
struct SkippedData {
  int64_t from_epoch = 0, from_batch = 0, to_epoch = 0, to_batch = 0;
};

class RecoveryPolicy : public Policy {
 public:
  explicit RecoveryPolicy(RecoveryOptions options = {});
  ~RecoveryPolicy() override;
  std::string name() const override { return "recovery"; }
  PolicyPhase phase() const override { return PolicyPhase::recovery; }

  void on_fit_begin(const TrainingRun& run) override;
  void on_fit_end(const TrainingRun& run) override;
  void on_step_begin(StepContext& ctx) override;
  void before_optimizer_step(StepContext& ctx) override;
  void on_step_end(StepContext& ctx) override;
  std::optional<std::string> should_stop(const TrainerState& state) override;
  void collect_metrics(Metrics& metrics) override;
  void save_state(StateDict& state) const override;
  void load_state(const StateDict& state) override;

  /// Anomalies seen, rollbacks taken, and the rung the current episode reached (0 = none).
  int64_t anomalies() const { return anomalies_; }
  int64_t rollbacks() const { return rollbacks_; }
  int64_t rung() const { return rung_; }
  const std::vector<SkippedData>& skipped_data() const { return skipped_; }
  /// One line per decision, in order (the report a failed run ends with).
  const std::vector<std::string>& decisions() const { return decisions_; }

 private:
  struct Snapshots;
  /// The anomaly this step shows, if any ("" = clean); `loss` and `norm` as every rank sees them.
  std::string judge(double loss, double norm) const;
  /// Climbs the ladder for the anomaly `why` at this step and acts; returns what it did.
  std::string climb(StepContext& ctx, const std::string& why);
  bool roll_back(StepContext& ctx, std::string& did);
  bool switch_precision(StepContext& ctx, std::string& did);
  /// The learning-rate multiplier the ladder holds now (rung 3 lowers it for lr_window steps).
  double lr_factor() const;
  void remember(const std::string& decision, double loss, double norm);

  RecoveryOptions options_;
  const TrainingRun* run_ = nullptr;
  bool bf16_supported_ = true;  // on the training device
  std::unique_ptr<Snapshots> snapshots_;

  // The ladder (saved in checkpoints). Step counts are the ladder's own, never rolled back.
  int64_t seen_steps_ = 0;
  int64_t rung_ = 0;
  int64_t last_anomaly_ = -1;
  int64_t anomalies_ = 0;
  int64_t rollbacks_ = 0;
  int64_t lr_until_ = -1;          // the lowered learning rate holds while seen_steps_ < this
  int64_t precision_override_ = -1;  // a Precision the ladder switched to, or -1
  bool gave_up_ = false;
  std::deque<double> history_;     // losses of the latest clean steps
  std::vector<SkippedData> skipped_;
  std::vector<std::string> decisions_;
  bool ignore_next_load_ = false;  // the Trainer restores a rollback's snapshot: keep the ladder
};

}  // namespace frugal
