#pragma once
// Progress on rank 0: on a terminal, a bar kept at the bottom of the screen below the log
// (epoch, step, share of the run, ETA, samples/s, loss), redrawn a few times a second; when
// stderr is not a terminal (CI, a batch job's log file), a plain "progress:" log line every
// `log_every_seconds`. The loss is read from the device only when the line is redrawn.
//
//   trainer.add_policy(std::make_shared<frugal::ProgressPolicy>());

#include <torch/arg.h>

#include <chrono>
#include <string>

#include "frugal/core/policy.hpp"

namespace frugal {

struct ProgressOptions {
  /// Terminal: seconds between redraws.
  TORCH_ARG(double, refresh_seconds) = 0.5;
  /// Not a terminal: seconds between plain progress lines; 0 = none.
  TORCH_ARG(double, log_every_seconds) = 60.0;
  /// Draw the bar even when stderr is not a terminal (tests).
  TORCH_ARG(bool, force_terminal) = false;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

/// "1h02m", "4m05s", "12s".
std::string format_duration(double seconds);

class ProgressPolicy : public Policy {
 public:
  explicit ProgressPolicy(ProgressOptions options = {});
  std::string name() const override { return "progress"; }
  PolicyPhase phase() const override { return PolicyPhase::observation; }
  void on_fit_begin(const TrainingRun& run) override;
  void on_step_end(StepContext& ctx) override;
  void on_fit_end(const TrainingRun& run) override;
  /// The latest progress text.
  const std::string& line() const { return line_; }

 private:
  std::string describe(StepContext& ctx, double seconds_since_last) const;

  ProgressOptions options_;
  const TrainingRun* run_ = nullptr;
  bool active_ = false;
  bool terminal_ = false;
  double progress_at_start_ = 0.0;
  std::chrono::steady_clock::time_point fit_start_, last_draw_, last_log_;
  int64_t samples_since_draw_ = 0;
  std::string line_;
};

}  // namespace frugal
