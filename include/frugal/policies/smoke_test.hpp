#pragma once
// The CPU smoke test: before an expensive run, a few batches of forward + backward + optimizer
// step on a CPU copy of the model catch shape and memory bugs in seconds instead of after the
// GPU job has queued and started. The real model's weights and the global RNG are untouched.
// On failure the report names the failing op, the module whose parameter it was applied to,
// the tensor shapes involved and the batch shapes.
//
//   trainer.add_policy(std::make_shared<frugal::SmokeTestPolicy>(
//       frugal::SmokeTestOptions().mode(frugal::SmokeTestMode::fail).batches(2)));
//   // or standalone:  frugal::SmokeTestReport r = frugal::run_smoke_test(trainer, opts);

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/base/enum_names.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/errors.hpp"

namespace frugal {

enum class SmokeTestMode {
  off,
  automatic,  // fail-mode when training on an accelerator, off when training on the CPU anyway
  fail,       // a failed smoke test stops the fit before it starts
  warn,       // a failed smoke test is logged and the fit goes on
};
constexpr std::array<EnumName<SmokeTestMode>, 4> names_of(SmokeTestMode) {
  return {{{SmokeTestMode::off, "off"}, {SmokeTestMode::automatic, "auto"}, {SmokeTestMode::fail, "fail"}, {SmokeTestMode::warn, "warn"}}};
}

struct SmokeTestOptions {
  TORCH_ARG(SmokeTestMode, mode) = SmokeTestMode::automatic;
  /// Batches of forward + backward + optimizer step to run.
  TORCH_ARG(int64_t, batches) = 2;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

struct SmokeTestReport {
  bool passed = false;
  int64_t batches_run = 0;         // batches that completed all three phases
  std::string phase;               // where it failed: "copy", "data", "forward", "backward", "optimizer step"
  std::string error;               // the exception text
  std::string failing_op;          // the last operator entered before the failure
  std::vector<std::string> op_inputs;  // its tensor inputs: shape, dtype, and the parameter if it is one
  std::string failing_module;      // module owning a parameter among those inputs, if any
  std::vector<std::string> batch_shapes;  // "input [2, 10] Float", ...
  double step_ms = 0.0;            // mean wall time of a completed batch
  int64_t peak_rss_bytes = 0;      // process resident-memory high-water mark during the test
  int64_t peak_rss_growth_bytes = 0;  // ... above the resident memory at its start

  /// A multi-line human-readable account.
  std::string to_string() const;
};

class SmokeTestFailed : public Error {
 public:
  explicit SmokeTestFailed(SmokeTestReport report);
  const SmokeTestReport& report() const noexcept { return report_; }

 private:
  SmokeTestReport report_;
};

class TrainingRun;

/// Runs the smoke test on a CPU copy of the run's model with its optimizer factory and data.
SmokeTestReport run_smoke_test(const TrainingRun& run, const SmokeTestOptions& options);

/// Runs the smoke test in on_fit_begin; in fail mode a failure throws SmokeTestFailed.
class SmokeTestPolicy : public Policy {
 public:
  explicit SmokeTestPolicy(SmokeTestOptions options = {});
  std::string name() const override { return "smoke_test"; }
  PolicyPhase phase() const override { return PolicyPhase::preflight; }
  void on_fit_begin(const TrainingRun& run) override;
  /// The report of the last run, if one ran.
  const SmokeTestReport& last_report() const { return report_; }
  bool ran() const { return ran_; }

 private:
  SmokeTestOptions options_;
  SmokeTestReport report_;
  bool ran_ = false;
};

}  // namespace frugal
