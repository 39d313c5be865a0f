#pragma once
// The out-of-memory safety net (StepContext::retry_window_on_out_of_memory, which gradient
// accumulation with halve_batch_on_oom asks for) as the step sequence sees it:
// where the current accumulation window began, whether this rank ran out of memory in it, and the
// stand-in part a rank that did must still play at the boundary, so that every rank runs the same
// collectives. The Trainer asks it one question at the boundary: did any rank fail this window?
// If so the window is dropped and run again with half the micro-batch (Trainer::halve_after_oom).

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/detail/loss_window.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/data/data_loader.hpp"

namespace frugal {
class Communicator;
}

namespace frugal::detail {

/// The Trainer's counters where a window began, to rewind to.
struct WindowStart {
  DataPosition position;
  int64_t micro_step = 0, samples_seen = 0;
  LossWindow::Mark log_window;
};

class OomSafetyNet {
 public:
  /// Armed for this window: its start is marked (a policy asked for retries in its first step).
  bool armed() const { return start_.has_value(); }
  /// After the policies' on_step_begin: marks where the window began when a policy asked for
  /// retries (`start` is called only then).
  void begin_micro_step(const StepContext& ctx, const std::function<WindowStart()>& start) {
    if (ctx.retries_window_on_out_of_memory() && !start_) start_ = start();
  }

  /// The forward or backward pass ran out of memory: the rest of this rank's window is skipped.
  void out_of_memory(const c10::OutOfMemoryError& e, int64_t batch_size, int64_t step);
  bool skipping() const { return skipping_; }
  /// A skipping rank at a boundary: a zero loss, and every policy sees the boundary (data
  /// parallelism arms its buckets in transform_loss) unless it already did in this micro-step.
  void stand_in(StepContext& ctx, const std::vector<std::shared_ptr<Policy>>& policies, const torch::Device& device,
                bool transformed) const;
  /// At a boundary, after the gradient reduction: whether any rank ran out of memory in the window
  /// (one decision for all). If none did, the window is over.
  bool window_failed(Communicator& communicator);
  /// Where the failed window began; the net is ready for the next one.
  WindowStart rewind();

 private:
  std::optional<WindowStart> start_;
  bool skipping_ = false;
};

}  // namespace frugal::detail
