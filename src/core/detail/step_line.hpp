#pragma once
// The training log line as a person reads it: step, epoch, loss, learning rate, throughput and
// data wait on every line; the policies' figures (loss scale, memory, TFLOP/s...) rounded to what
// a reader uses, and only when their rounded value changed since the line before, so figures that
// stay put (the memory report) are said once, at the start. metrics.jsonl keeps every figure at
// full precision.

#include <cstdint>
#include <map>
#include <string>

#include "frugal/base/metrics.hpp"

namespace frugal::detail {

/// "peak memory 453 MB", "0.0373 TFLOP/s", "loss scale 65536", "mfu 3.73%": a figure of
/// collect_metrics as a reader wants it, three significant digits (whole numbers from 100 up).
std::string readable_figure(const std::string& name, double value);
/// Three significant digits, whole numbers from 100 up, "nan" / "inf" as such.
std::string readable_number(double value);

class StepLine {
 public:
  struct Figures {
    int64_t step = 0, epoch = 0;
    double loss = 0.0, lr = 0.0, samples_per_s = 0.0, data_wait_fraction = 0.0;
  };
  /// The line for this log window; remembers what it said of each of `extra`.
  std::string format(const Figures& figures, const Metrics& extra);

 private:
  std::map<std::string, std::string> said_;  // each extra figure's text as last printed
};

}  // namespace frugal::detail
