#pragma once
// A sweep: every cell of a grid run as its own process and run directory, with the program's
// CPU smoke test first, for a fixed number of steps (or seconds) after warm-up; then the
// table, results.csv, results.json, sweep.json and the plots in the sweep directory. Each
// finished run leaves result.json beside its run directory, so a sweep run again in the same
// directory skips what is done.

#include <filesystem>
#include <string>
#include <vector>

#include "grid.hpp"
#include "report.hpp"

namespace frugal::sweep {

struct SweepOptions {
  std::vector<std::string> program;   // the command every cell runs, before the sweep's flags
  std::filesystem::path out;
  int64_t steps = 30;                 // timed steps after warm-up (when seconds is 0)
  double seconds = 0.0;               // > 0: time each cell this long after warm-up instead
  int64_t warmup = 5;
  int repeat = 1;
  std::string objective = "samples_per_s";
  double price_per_device_hour = 0.0;
  std::string devices;                // "0,1,2,3": one cell per CUDA device at a time
  int parallel = 1;                   // without devices: concurrent CPU processes
  bool retry_failed = false;
  bool plots = true;
};

/// Runs the sweep; returns the exit code (0 when every cell ran, whatever its result; 128 + the
/// signal when stopped). std::invalid_argument for bad options, naming them.
int run_sweep(const Grid& grid, const SweepOptions& options);

/// The flags the sweep adds to the program's own for one run of `cell` in `run_dir`.
std::vector<std::string> cell_flags(const Cell& cell, const SweepOptions& options, const std::filesystem::path& run_dir);

}  // namespace frugal::sweep
