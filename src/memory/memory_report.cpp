#include "frugal/memory/memory_report.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"
#include "optim/quantized_param_state.hpp"

namespace frugal {

void MemoryReportPolicy::on_fit_begin(const TrainingRun& run) { run_ = &run; }

bool MemoryReportPolicy::due(const TrainerState& state) const {
  return run_ != nullptr && (state.step == 1 || state.step % run_->options().log_every_n_steps() == 0);
}

void MemoryReportPolicy::before_optimizer_step(StepContext& ctx) {
  measuring_ = due(ctx.state());
  if (!measuring_) return;
  footprint_.parameter_bytes = storage_bytes(ctx.module().parameters());
  footprint_.gradient_bytes = run_->gradient_bytes();
}

void MemoryReportPolicy::on_after_optimizer_step(StepContext& ctx) {
  if (!measuring_) return;
  measuring_ = false;
  std::vector<torch::Tensor> state;
  for (const auto& [key, entry] : ctx.optimizer().state()) {
    // LibTorch's optimizers' kinds of state (an unknown kind is not counted).
    if (auto* quantized = dynamic_cast<const QuantizedParamState*>(entry.get())) {
      for (const auto& t : quantized->tensors()) state.push_back(t);
    } else if (auto* adam = dynamic_cast<const torch::optim::AdamWParamState*>(entry.get())) {
      state.insert(state.end(), {adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()});
    } else if (auto* adam_ = dynamic_cast<const torch::optim::AdamParamState*>(entry.get())) {
      state.insert(state.end(), {adam_->exp_avg(), adam_->exp_avg_sq(), adam_->max_exp_avg_sq()});
    } else if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(entry.get())) {
      state.push_back(sgd->momentum_buffer());
    } else if (auto* rms = dynamic_cast<const torch::optim::RMSpropParamState*>(entry.get())) {
      state.insert(state.end(), {rms->square_avg(), rms->momentum_buffer(), rms->grad_avg()});
    } else if (auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(entry.get())) {
      state.push_back(adagrad->sum());
    }
  }
  footprint_.optimizer_state_bytes = storage_bytes(state);
  if (logged_) return;
  logged_ = true;
  constexpr double mb = 1024.0 * 1024.0;
  log::info(c10::str("memory of this rank at step ", ctx.state().step, ": parameters ", footprint_.parameter_bytes / mb,
                     " MB, gradients ", footprint_.gradient_bytes / mb, " MB, optimizer state ", footprint_.optimizer_state_bytes / mb, " MB"));
}

void MemoryReportPolicy::collect_metrics(Metrics& metrics) {
  if (!logged_) return;
  constexpr double mb = 1024.0 * 1024.0;
  metrics["memory_parameters_mb"] = static_cast<double>(footprint_.parameter_bytes) / mb;
  metrics["memory_gradients_mb"] = static_cast<double>(footprint_.gradient_bytes) / mb;
  metrics["memory_optimizer_mb"] = static_cast<double>(footprint_.optimizer_state_bytes) / mb;
}

}  // namespace frugal
