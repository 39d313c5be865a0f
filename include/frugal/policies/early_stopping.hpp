#pragma once
// Early stopping on a validation metric: stops when it has not improved by min_delta for
// `patience` evaluations, or crossed a stopping threshold (good enough) or a divergence threshold
// (hopeless), or became non-finite. A grace period of evaluations lets a metric rise before it
// falls (curriculum learning). Its counters are saved with checkpoints; the log says why it stopped.
//
//   trainer.add_policy(std::make_shared<frugal::EarlyStoppingPolicy>(
//       frugal::EarlyStoppingOptions().monitor("accuracy").mode(frugal::MonitorMode::max).patience(5)));

#include <torch/arg.h>

#include <cmath>
#include <limits>
#include <string>

#include "frugal/base/monitor_mode.hpp"
#include "frugal/core/policy.hpp"

namespace frugal {

struct EarlyStoppingOptions {
  TORCH_ARG(std::string, monitor) = "loss";
  TORCH_ARG(MonitorMode, mode) = MonitorMode::min;
  TORCH_ARG(int64_t, patience) = 3;      // evaluations without improvement
  TORCH_ARG(double, min_delta) = 0.0;    // an improvement smaller than this does not count
  TORCH_ARG(double, stopping_threshold) = std::numeric_limits<double>::quiet_NaN();    // NaN = off
  TORCH_ARG(double, divergence_threshold) = std::numeric_limits<double>::quiet_NaN();  // NaN = off
  TORCH_ARG(bool, check_finite) = true;
  TORCH_ARG(int64_t, grace_evaluations) = 0;  // evaluations before it may stop the run

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

class EarlyStoppingPolicy : public Policy {
 public:
  explicit EarlyStoppingPolicy(EarlyStoppingOptions options = {});
  std::string name() const override { return "early_stopping"; }
  PolicyPhase phase() const override { return PolicyPhase::stopping; }
  void on_validation_end(const TrainerState& state, const Metrics& metrics) override;
  std::optional<std::string> should_stop(const TrainerState& state) override;
  void save_state(StateDict& state) const override;
  void load_state(const StateDict& state) override;

  double best() const { return best_; }
  int64_t evaluations_without_improvement() const { return wait_; }

 private:
  EarlyStoppingOptions options_;
  double best_;
  int64_t wait_ = 0;
  int64_t evaluations_ = 0;
  std::optional<std::string> reason_;
};

}  // namespace frugal
