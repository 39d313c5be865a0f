#pragma once
// The training loss as the step sequence keeps it, without making the loop wait for the device:
// each optimizer step's loss summed in fp32 over its micro-steps (one tensor, shared through
// StepContext with the policies and the non-finite watch), and the log window since the last log
// line: its steps' losses (those a policy discarded stay out), samples, the loader's wait and the
// host time in gradient reduction. Nothing is read back until a log line closes the window.

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "frugal/core/step_context.hpp"

namespace frugal::detail {

class LossWindow {
 public:
  /// Opens a window now; `data_wait_seconds` is the loader's wait counter at this moment.
  void open(double data_wait_seconds);
  /// Adds this micro-step's loss (ctx.loss(), possibly bf16) to its optimizer step's fp32 sum and
  /// publishes the sum on `ctx`.
  void add_loss(StepContext& ctx);
  void add_reduce_seconds(double seconds) { reduce_seconds_ += seconds; }
  /// Ends a micro-step of `samples` examples; at a boundary the step's loss joins the window
  /// unless a policy discarded it, and the next step's sum starts.
  void end_micro_step(const StepContext& ctx, int64_t samples);
  /// Forgets the current optimizer step's loss (a rollback, a dropped window).
  void drop_step();
  bool has_steps() const { return micro_steps_ > 0; }

  /// Where the window stands, to go back to (the out-of-memory safety net).
  struct Mark {
    int64_t micro_steps = 0, samples = 0;
    torch::Tensor loss_sum;
  };
  Mark mark() const;
  void rewind(const Mark& mark);

  /// A log line's figures, of the whole job: `sum_across_ranks` adds the ranks' parts up (one
  /// collective). Reads the loss back (the loop's one wait) and opens the next window.
  struct Figures {
    double loss = 0.0, samples_per_s = 0.0, data_wait_ms = 0.0, data_wait_fraction = 0.0, communication_fraction = 0.0,
           compute_fraction = 0.0;
  };
  using SumAcrossRanks = std::function<std::vector<double>(std::vector<double>)>;
  Figures close(double data_wait_seconds, int64_t world_size, const SumAcrossRanks& sum_across_ranks);
  /// The figures of the window closed last.
  const Figures& last() const { return last_; }

 private:
  torch::Tensor step_loss_sum_;  // the current optimizer step's, over its micro-steps so far
  int64_t step_micro_steps_ = 0;
  torch::Tensor loss_sum_;  // the window's
  int64_t micro_steps_ = 0;
  int64_t samples_ = 0;
  std::chrono::steady_clock::time_point start_;
  double data_wait_start_ = 0.0;
  double reduce_seconds_ = 0.0;
  Figures last_;
};

}  // namespace frugal::detail
