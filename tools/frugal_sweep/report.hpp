#pragma once
// A sweep's results: one row per cell (its settings, status, and the medians of its repeats),
// printed as a table sorted by the objective and written as CSV and JSON.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cell_metrics.hpp"
#include "grid.hpp"

namespace frugal::sweep {

struct CellSummary {
  int index = 0;                    // the cell's number in the grid, from 1
  Cell cell;
  std::string status;               // "ok" or "failed"
  Failure failure;                  // when failed: of the first failed repeat
  RunFigures figures;               // medians over the repeats that succeeded
  double samples_per_s_min = 0.0, samples_per_s_max = 0.0;
  int repeats_ok = 0, repeats = 0;
  double seconds = 0.0;             // the cell's own run time, all repeats
};

/// The figures a sweep can be sorted by, and whether more is better.
struct Objective {
  std::string name;
  bool higher_is_better = true;
};
/// samples_per_s, tokens_per_s, mfu (higher is better); cost_per_epoch, peak_memory_mb, loss,
/// validation_loss (lower). std::invalid_argument for any other name.
Objective parse_objective(const std::string& name);
/// The objective's figure of a cell, if it has one.
std::optional<double> objective_value(const CellSummary& s, const Objective& objective);

/// Successful cells by the objective (best first), then the failed ones, in grid order.
std::vector<CellSummary> sort_by(std::vector<CellSummary> cells, const Objective& objective);

std::string format_table(const std::vector<CellSummary>& cells, const std::vector<Axis>& axes, const Objective& objective);
void write_csv(const std::filesystem::path& path, const std::vector<CellSummary>& cells, const std::vector<Axis>& axes);
void write_json(const std::filesystem::path& path, const std::vector<CellSummary>& cells, const std::vector<Axis>& axes,
                const Objective& objective);

/// Writes `text` to `path` through a temporary file and a rename: readers see the old or the new.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace frugal::sweep
