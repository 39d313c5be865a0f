#pragma once
// Watches the training loss for NaN and infinity without making the loop wait for the device:
// the first optimizer step whose loss was not finite is kept in two device scalars and read back
// only where the loop waits anyway (a log line, a checkpoint, the end of the fit). Steps the fp16
// loss scaler skipped do not count: their overflow is the scaler's to handle.

#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace frugal::detail {

class NonFiniteWatch {
 public:
  struct Finding {
    int64_t step = 0;
    double loss = 0.0;  // the step's loss summed over its micro-steps: nan or ±inf
  };

  /// Adds one micro-step's (detached) loss to the current optimizer step's.
  void add_micro_step(const torch::Tensor& loss);
  /// Ends optimizer step `step`: its loss counts unless the step was cancelled.
  void end_step(int64_t step, bool cancelled);
  /// The first step seen with a non-finite loss, if any (waits for the device).
  std::optional<Finding> first() const;

 private:
  torch::Tensor step_loss_;   // fp32, summed over the current step's micro-steps
  torch::Tensor first_step_;  // int64, -1 until a non-finite step is seen
  torch::Tensor first_loss_;  // fp32
};

}  // namespace frugal::detail
