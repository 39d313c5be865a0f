#pragma once
// Watches the training loss for NaN and infinity without making the loop wait for the device:
// each optimizer step's loss (summed over its micro-steps) stays on the device until the loop
// waits anyway (a log line, a checkpoint, the end of the fit), and then all of them are read back
// at once. Steps the fp16 loss scaler skipped do not count: their overflow is the scaler's to
// handle. On the hot path this costs nothing: it keeps the step's loss the Trainer sums anyway.

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace frugal::detail {

class NonFiniteWatch {
 public:
  struct Finding {
    int64_t step = 0;
    double loss = 0.0;  // the step's loss summed over its micro-steps: nan or ±inf
  };

  /// Off (trainer.stop_on_nonfinite_loss=false), it keeps nothing and finds nothing.
  explicit NonFiniteWatch(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  /// Ends optimizer step `step`: its loss (the fp32 sum over its micro-steps, not changed after
  /// this) is kept for the next read unless the step was cancelled.
  void end_step(int64_t step, bool cancelled, torch::Tensor step_loss);
  /// The first step seen with a non-finite loss, if any (waits for the device once).
  std::optional<Finding> first();

 private:
  bool enabled_;
  std::vector<std::pair<int64_t, torch::Tensor>> pending_;  // (step, loss) not read yet
  std::optional<Finding> found_;
};

}  // namespace frugal::detail
