#pragma once
// PNG charts of a sweep, drawn with cairo: throughput against peak memory with the Pareto front
// (the cells no other cell beats on both), and one horizontal bar chart per metric.

#include <filesystem>
#include <string>
#include <vector>

#include "report.hpp"

namespace frugal::sweep {

/// The cells (indices into `cells`) on the Pareto front: no other ok cell has at least their
/// throughput with at most their memory and is better in one of the two. By memory, ascending.
std::vector<size_t> pareto_front(const std::vector<CellSummary>& cells);

/// Writes throughput_vs_memory.png and bars_<metric>.png into `dir`; returns the files written.
std::vector<std::filesystem::path> write_plots(const std::filesystem::path& dir, const std::vector<CellSummary>& cells);

}  // namespace frugal::sweep
