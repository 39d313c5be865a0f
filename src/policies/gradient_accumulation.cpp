#include "frugal/policies/gradient_accumulation.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"

namespace frugal {

void GradientAccumulationOptions::validate() const {
  if (steps() < 1) throw OptionError("steps", c10::str("steps must be >= 1, got ", steps()));
  if (effective_batch_size() < 0) {
    throw OptionError("effective_batch_size",
                      c10::str("effective_batch_size must be >= 0 (0 = off), got ", effective_batch_size()));
  }
}

int64_t accumulation_steps_for(int64_t effective_batch, int64_t micro_batch, int64_t replicas) {
  const int64_t per_step = micro_batch * replicas;
  if (effective_batch % per_step != 0 || effective_batch < per_step) {
    throw OptionError("effective_batch_size",
                      c10::str("effective_batch_size ", effective_batch, " is not a multiple of micro-batch ", micro_batch,
                               " x ", replicas, " replica(s) = ", per_step));
  }
  return effective_batch / per_step;
}

GradientAccumulationPolicy::GradientAccumulationPolicy(GradientAccumulationOptions options)
    : options_(std::move(options)), steps_(options_.steps()) {
  options_.validate();
}

void GradientAccumulationPolicy::on_fit_begin(const TrainingRun& run) {
  const auto& data = run.data_options();
  replicas_ = data.num_replicas();
  if (options_.effective_batch_size() > 0) {
    steps_ = accumulation_steps_for(options_.effective_batch_size(), data.batch_size(), data.num_replicas());
  }
  if (steps_ > 1) {
    log::info(c10::str("gradient accumulation: ", steps_, " micro-batches of ", data.batch_size(), " per optimizer step"));
  }
}

void GradientAccumulationPolicy::keep_effective_batch(int64_t old_size, int64_t new_size) {
  const int64_t before = steps_;
  if (options_.effective_batch_size() > 0) {
    steps_ = accumulation_steps_for(options_.effective_batch_size(), new_size, replicas_);
  } else if ((steps_ * old_size) % new_size == 0) {
    steps_ = steps_ * old_size / new_size;
  } else {
    throw TrainingError(c10::str("gradient accumulation: the effective batch of ", steps_ * old_size,
                                 " is not a multiple of the new micro-batch ", new_size));
  }
  in_window_ = 0;
  log::info(c10::str("gradient accumulation: ", steps_, " micro-batches of ", new_size, " per optimizer step (was ", before,
                     " of ", old_size, ")"));
}

void GradientAccumulationPolicy::on_step_begin(StepContext& ctx) {
  if (const auto& change = ctx.micro_batch_change()) keep_effective_batch(change->from, change->to);
  // Windows never span epochs (checkpoints are taken at boundaries, where the window is empty).
  if (ctx.first_in_epoch()) in_window_ = 0;
  if (options_.halve_batch_on_oom()) ctx.retry_window_on_out_of_memory();
  ++in_window_;
  const bool boundary = in_window_ == steps_ || ctx.last_in_epoch();
  ctx.set_boundary(boundary);
  if (boundary) in_window_ = 0;
}

torch::Tensor GradientAccumulationPolicy::transform_loss(StepContext&, torch::Tensor loss) {
  return steps_ == 1 ? loss : loss / static_cast<double>(steps_);
}

void GradientAccumulationPolicy::save_state(StateDict& state) const {
  state["in_window"] = torch::tensor(in_window_);
  state["steps"] = torch::tensor(steps_);
}

void GradientAccumulationPolicy::load_state(const StateDict& state) {
  if (auto it = state.find("in_window"); it != state.end()) in_window_ = it->second.item<int64_t>();
}

}  // namespace frugal
