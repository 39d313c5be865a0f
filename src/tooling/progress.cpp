#include "frugal/tooling/progress.hpp"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"

namespace frugal {

void ProgressOptions::validate() const {
  if (!(refresh_seconds() > 0)) throw OptionError("refresh_seconds", c10::str("refresh_seconds must be > 0, got ", refresh_seconds()));
  if (!(log_every_seconds() >= 0)) {
    throw OptionError("log_every_seconds", c10::str("log_every_seconds must be >= 0, got ", log_every_seconds()));
  }
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(text, sizeof(text), "%llds", static_cast<long long>(s));
  }
  return text;
}

ProgressPolicy::ProgressPolicy(ProgressOptions options) : options_(std::move(options)) { options_.validate(); }

void ProgressPolicy::on_fit_begin(const TrainingRun& run) {
  run_ = &run;
  active_ = run.rank() == 0;
  terminal_ = options_.force_terminal() || log::console_is_terminal();
  progress_at_start_ = run.progress();
  fit_start_ = last_draw_ = last_log_ = std::chrono::steady_clock::now();
  samples_since_draw_ = 0;
}

std::string ProgressPolicy::describe(StepContext& ctx, double seconds_since_last) const {
  const TrainerState& s = ctx.state();
  const double done = run_->progress();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start_).count();
  const double done_here = done - progress_at_start_;
  const std::string eta = done_here > 0 ? format_duration(elapsed / done_here * (1.0 - done)) : "?";
  constexpr int kWidth = 20;
  const int filled = std::clamp(static_cast<int>(done * kWidth), 0, kWidth);
  const double samples_per_s = static_cast<double>(samples_since_draw_ * run_->world_size()) / std::max(1e-9, seconds_since_last);
  return c10::str("epoch ", s.epoch + 1, "/", run_->options().max_epochs(), " step ", s.step, " [",
                  std::string(filled, '#'), std::string(kWidth - filled, '.'), "] ", static_cast<int64_t>(100 * done), "% ",
                  eta, " left, ", static_cast<int64_t>(samples_per_s), " samples/s, loss ", ctx.loss().item<double>());
}

void ProgressPolicy::on_step_end(StepContext& ctx) {
  if (!active_) return;
  samples_since_draw_ += ctx.batch().size();
  const auto now = std::chrono::steady_clock::now();
  const double since_draw = std::chrono::duration<double>(now - last_draw_).count();
  if (terminal_) {
    if (since_draw < options_.refresh_seconds()) return;
    line_ = describe(ctx, since_draw);
    log::set_status_line(line_);
  } else {
    if (options_.log_every_seconds() <= 0 ||
        std::chrono::duration<double>(now - last_log_).count() < options_.log_every_seconds()) {
      return;
    }
    line_ = describe(ctx, since_draw);
    log::info("progress: " + line_);
    last_log_ = now;
  }
  last_draw_ = now;
  samples_since_draw_ = 0;
}

void ProgressPolicy::on_fit_end(const TrainingRun& /*run*/) {
  if (active_ && terminal_) log::set_status_line("");
}

}  // namespace frugal
