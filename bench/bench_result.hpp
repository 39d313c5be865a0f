#pragma once
// One benchmark result as a JSON line (name, value, unit, baseline, ratio, command), appended to
// the file bench/run passes, build/bench/results.jsonl by default.

#include <string>

namespace frugal::bench {

struct Result {
  std::string name;
  double value = 0.0;     // the measured figure
  std::string unit;
  double baseline = 0.0;  // the same figure for the baseline, measured in the same process
  std::string command;    // what reproduces it
  double ratio() const { return baseline != 0.0 ? value / baseline : 0.0; }
};

void append(const std::string& path, const Result& result);

}  // namespace frugal::bench
