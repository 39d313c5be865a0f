#pragma once
// What the run costs: a price per device-hour times the devices gives the burn rate; the policy
// logs the cost so far, the cost of each epoch and the projected cost of the whole run, warns at
// fractions of a budget (log warning + a "budget_alert" metrics record), and at a hard budget
// stops the run on every rank at the same step (a checkpoint policy then saves it). The money
// spent survives a resume: it is saved with the checkpoint.
//
//   trainer.add_policy(std::make_shared<frugal::CostPolicy>(
//       frugal::CostOptions().price_per_device_hour(3.5).budget(200).hard_budget(250)));

#include <torch/arg.h>

#include <functional>
#include <string>
#include <vector>

#include "frugal/core/policy.hpp"

namespace frugal {

struct CostOptions {
  /// Price of one device for one hour; 0 = cost tracking off.
  TORCH_ARG(double, price_per_device_hour) = 0.0;
  /// Devices billed; 0 = the world size (one device per rank).
  TORCH_ARG(int64_t, devices) = 0;
  /// Money the run may spend; alerts fire at the fractions below. 0 = no alerts.
  TORCH_ARG(double, budget) = 0.0;
  /// Comma-separated fractions of `budget` that raise an alert once each.
  TORCH_ARG(std::string, alert_fractions) = "0.5,0.8,0.9,1.0";
  /// Stop (checkpointed) once the cost reaches this; 0 = never.
  TORCH_ARG(double, hard_budget) = 0.0;
  TORCH_ARG(std::string, currency) = "USD";

 public:  // TORCH_ARG leaves the struct in private:
  /// Throws OptionError naming the bad field and value.
  void validate() const;
  /// alert_fractions parsed, ascending.
  std::vector<double> fractions() const;
};

class CostPolicy : public Policy {
 public:
  /// `clock` returns seconds (steady); tests pass a synthetic one.
  explicit CostPolicy(CostOptions options, std::function<double()> clock = {});
  std::string name() const override { return "cost"; }
  PolicyPhase phase() const override { return PolicyPhase::observation; }

  void on_fit_begin(const TrainingRun& run) override;
  void on_step_begin(StepContext& ctx) override;
  void on_epoch_end(const TrainerState& state) override;
  std::optional<std::string> should_stop(const TrainerState& state) override;
  void collect_metrics(Metrics& metrics) override;
  void save_state(StateDict& state) const override;
  void load_state(const StateDict& state) override;

  /// Money spent so far, including what earlier runs of a resumed job spent.
  double cost() const;
  /// Money per hour of all billed devices.
  double burn_rate() const;
  /// The cost when the run reaches its end at the pace of this fit so far; cost() until it has progressed.
  double projected_cost() const;

 private:
  double seconds() const;   // billed seconds: earlier fits plus this one
  double progress() const;  // fraction of the whole run done, from the Trainer's counters
  void check_alerts();

  CostOptions options_;
  std::vector<double> fractions_;
  std::function<double()> clock_;
  const TrainingRun* run_ = nullptr;
  double devices_ = 1.0;
  double earlier_seconds_ = 0.0;  // restored from a checkpoint
  double fit_start_ = 0.0;
  double progress_at_start_ = 0.0;
  double epoch_start_cost_ = 0.0;
  size_t alerts_fired_ = 0;  // fractions_[0..alerts_fired_) have fired
};

}  // namespace frugal
