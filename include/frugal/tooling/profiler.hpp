#pragma once
// Continuous light profiling: a few micro-steps recorded with LibTorch's Kineto profiler (CPU
// operators, and CUDA kernels on a GPU) every N optimizer steps, at each epoch start and/or
// every T minutes. Each capture writes a Chrome/Perfetto trace to <dir>/step_<N>.trace.json and
// the top operators by self time to <dir>/step_<N>.top.txt, logs that table and records a
// "profile" metrics line. Between captures the policy costs one counter check per step.
//
//   trainer.add_policy(std::make_shared<frugal::ProfilerPolicy>(
//       frugal::ProfilerOptions().every_n_steps(1000).steps(3)));

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/policy.hpp"

namespace torch::autograd::profiler {
struct ProfilerResult;
}

namespace frugal {

struct ProfilerOptions {
  /// Start a capture every N optimizer steps; 0 = not by steps.
  TORCH_ARG(int64_t, every_n_steps) = 0;
  /// Start a capture every T minutes; 0 = not by time.
  TORCH_ARG(double, every_n_minutes) = 0.0;
  /// Start a capture at the beginning of each epoch (after `skip_steps`).
  TORCH_ARG(bool, every_epoch) = false;
  /// Micro-steps at the start of each epoch that are never profiled (warm-up, cuDNN autotuning).
  TORCH_ARG(int64_t, skip_steps) = 5;
  /// Micro-steps recorded per capture.
  TORCH_ARG(int64_t, steps) = 3;
  /// Operators listed in the summary.
  TORCH_ARG(int64_t, top) = 15;
  /// Record input shapes too (larger traces).
  TORCH_ARG(bool, record_shapes) = false;
  /// Profile every rank (traces named per rank), not only rank 0.
  TORCH_ARG(bool, all_ranks) = false;
  /// Where traces go; "" = <run_dir>/profiles.
  TORCH_ARG(std::string, dir) = "";

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
  bool enabled() const { return every_n_steps() > 0 || every_n_minutes() > 0 || every_epoch(); }
};

/// One operator's share of a capture.
struct OperatorTime {
  std::string name;
  std::string device;  // "cpu" or "cuda"
  double self_ms = 0.0;
  double total_ms = 0.0;
  int64_t calls = 0;
};

class ProfilerPolicy : public Policy {
 public:
  explicit ProfilerPolicy(ProfilerOptions options = {});
  ~ProfilerPolicy() override;
  std::string name() const override { return "profiler"; }
  PolicyPhase phase() const override { return PolicyPhase::observation; }
  void on_fit_begin(const TrainingRun& run) override;
  void on_fit_end(const TrainingRun& run) override;
  void on_step_begin(StepContext& ctx) override;
  void on_step_end(StepContext& ctx) override;

  /// Captures written so far (trace files).
  const std::vector<std::filesystem::path>& traces() const { return traces_; }
  /// The operators of the latest capture, by self time, descending.
  const std::vector<OperatorTime>& last_summary() const { return last_summary_; }

 private:
  void start();
  void finish(const TrainerState& state);

  ProfilerOptions options_;
  const TrainingRun* run_ = nullptr;
  bool participating_ = false;  // this rank profiles
  std::filesystem::path dir_;
  bool due_ = false;            // a capture starts at the next micro-step
  bool active_ = false;
  int64_t recorded_steps_ = 0;
  int64_t epoch_steps_ = 0;     // micro-steps since the epoch began
  int64_t steps_at_start_ = 0;  // the capture's first optimizer step
  std::chrono::steady_clock::time_point last_capture_;
  std::vector<std::filesystem::path> traces_;
  std::vector<OperatorTime> last_summary_;
};

/// Whether a GPU kernel is a matrix-multiply / convolution / attention kernel (compute-bound on
/// tensor cores) rather than an elementwise, normalisation, reduction or copy kernel
/// (memory-bound), by its name: gemm, cutlass, cublas, conv, cudnn, xmma, flash, fmha, attention.
bool is_compute_bound_kernel(const std::string& name);

/// Operators of a finished capture by self time (time not spent in nested operators), CPU
/// operators and GPU kernels alike, descending.
std::vector<OperatorTime> operators_by_self_time(const torch::autograd::profiler::ProfilerResult& result);

}  // namespace frugal
