#include "core/detail/loss_window.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace frugal::detail {

void LossWindow::open(double data_wait_seconds) {
  start_ = std::chrono::steady_clock::now();
  data_wait_start_ = data_wait_seconds;
  reduce_seconds_ = 0.0;
}

void LossWindow::add_loss(StepContext& ctx) {
  // One fp32 scalar per optimizer step (the loss may be bf16 under autocast).
  if (step_loss_sum_.defined()) {
    step_loss_sum_.add_(ctx.loss());
  } else {
    step_loss_sum_ = ctx.loss().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
  ++step_micro_steps_;
  ctx.set_step_loss(step_loss_sum_, step_micro_steps_);
}

void LossWindow::end_micro_step(const StepContext& ctx, int64_t samples) {
  samples_ += samples;
  if (!ctx.boundary()) return;
  if (!ctx.loss_discarded()) {  // the step's losses join the log window
    if (loss_sum_.defined()) {
      loss_sum_.add_(step_loss_sum_);
    } else {  // a copy: the non-finite watch keeps the step's own until it reads it
      loss_sum_ = step_loss_sum_.clone();
    }
    micro_steps_ += step_micro_steps_;
  }
  drop_step();
}

void LossWindow::drop_step() {
  step_loss_sum_ = torch::Tensor();
  step_micro_steps_ = 0;
}

LossWindow::Mark LossWindow::mark() const {
  return {micro_steps_, samples_, loss_sum_.defined() ? loss_sum_.clone() : torch::Tensor()};
}

void LossWindow::rewind(const Mark& mark) {
  micro_steps_ = mark.micro_steps;
  samples_ = mark.samples;
  loss_sum_ = mark.loss_sum;
  drop_step();
}

LossWindow::Figures LossWindow::close(double data_wait_seconds, int64_t world_size, const SumAcrossRanks& sum_across_ranks) {
  // Loss and throughput of the whole job: summed across ranks (every rank logs at the same step).
  const double data_wait = data_wait_seconds - data_wait_start_;
  const std::vector<double> window =
      sum_across_ranks({loss_sum_.defined() ? loss_sum_.item<double>() : 0.0, static_cast<double>(micro_steps_),
                        static_cast<double>(samples_), data_wait, reduce_seconds_});
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
  const auto ranks = static_cast<double>(world_size);
  Figures f;
  // nan when every step of the window had its loss discarded (the recovery ladder's skips)
  f.loss = window[1] > 0 ? window[0] / window[1] : std::nan("");
  f.samples_per_s = window[2] / seconds;
  // Time the loop spent waiting for its next batch: per micro-step, and as a share of the
  // window (mean over ranks). Near 0 means the data pipeline keeps up.
  f.data_wait_ms = 1000.0 * window[3] / window[1];
  f.data_wait_fraction = window[3] / ranks / seconds;
  // The rest of the window split into communication (host time in gradient reduction; with
  // overlap most of it hides in backward) and compute.
  f.communication_fraction = window[4] / ranks / seconds;
  f.compute_fraction = std::max(0.0, 1.0 - f.data_wait_fraction - f.communication_fraction);
  last_ = f;
  loss_sum_ = torch::Tensor();
  micro_steps_ = 0;
  samples_ = 0;
  start_ = now;
  data_wait_start_ = data_wait_seconds;
  reduce_seconds_ = 0.0;
  return f;
}

}  // namespace frugal::detail
