#pragma once
// What one run of a cell measured, read from the metrics.jsonl a Frugal program writes in its
// run directory, and why a run failed, read from its exit status and its log.

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace frugal::sweep {

struct RunFigures {
  double samples_per_s = 0.0;       // after warm-up: samples / seconds between the log lines
  std::optional<double> tokens_per_s;
  double peak_memory_mb = 0.0;      // the largest reported (GPU allocator peak, or CPU resident)
  double data_fraction = 0.0;       // step time waiting for data, mean after warm-up
  double compute_fraction = 0.0;
  double communication_fraction = 0.0;
  std::optional<double> mfu;
  std::optional<double> cost_per_epoch;  // when a price per device-hour is given
  double loss = 0.0;                // of the last training log line
  std::optional<double> validation_loss;
  int64_t steps = 0;                // the last step logged
};

/// Reads `metrics` (one JSON object per line, as frugal::MetricsLog writes). Steps up to
/// `warmup_steps` are not timed. `price_per_device_hour` > 0 gives the cost of an epoch.
/// std::runtime_error naming the file when it holds no training line after warm-up.
RunFigures read_run_figures(const std::filesystem::path& metrics, int64_t warmup_steps, double price_per_device_hour);

/// Whether `metrics` already holds a training line past step `warmup_steps` (--seconds starts
/// its clock there). Lines that are not what a Frugal program writes are passed over.
bool has_training_line_after(const std::filesystem::path& metrics, int64_t warmup_steps);

/// A short class of failure ("out_of_memory", "smoke_test", "non_finite", "bad_config",
/// "signal", "error") and the program's own last words from its log.
struct Failure {
  std::string kind;
  std::string message;
};
Failure classify_failure(int exit_code, int signal, const std::filesystem::path& log);

nlohmann::json to_json(const RunFigures& f);
RunFigures figures_from_json(const nlohmann::json& j);

}  // namespace frugal::sweep
