#include "frugal/tooling/profiler.hpp"

#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace fs = std::filesystem;
namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

void ProfilerOptions::validate() const {
  if (every_n_steps() < 0) throw OptionError("every_n_steps", c10::str("every_n_steps must be >= 0, got ", every_n_steps()));
  if (!(every_n_minutes() >= 0)) throw OptionError("every_n_minutes", c10::str("every_n_minutes must be >= 0, got ", every_n_minutes()));
  if (skip_steps() < 0) throw OptionError("skip_steps", c10::str("skip_steps must be >= 0, got ", skip_steps()));
  if (steps() < 1) throw OptionError("steps", c10::str("steps must be >= 1, got ", steps()));
  if (top() < 1) throw OptionError("top", c10::str("top must be >= 1, got ", top()));
}

bool is_compute_bound_kernel(const std::string& name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* part : {"gemm", "cutlass", "cublas", "nvjet", "conv", "cudnn", "xmma", "wgmma", "flash", "fmha", "attention", "wgrad",
                           "dgrad"}) {
    if (lower.find(part) != std::string::npos) return true;
  }
  return false;
}

std::vector<OperatorTime> operators_by_self_time(const kineto::ProfilerResult& result) {
  struct Span {
    const kineto::KinetoEvent* event;
    uint64_t start, end;
    uint64_t children = 0;
  };
  // CPU-side events nest by time within their thread: self time = duration - direct children.
  std::map<uint64_t, std::vector<Span>> threads;
  std::map<std::pair<std::string, std::string>, OperatorTime> totals;
  auto add = [&](const kineto::KinetoEvent& e, const char* device, uint64_t self_ns) {
    OperatorTime& op = totals[{e.name(), device}];
    op.name = e.name();
    op.device = device;
    op.self_ms += static_cast<double>(self_ns) / 1e6;
    op.total_ms += static_cast<double>(e.durationNs()) / 1e6;
    ++op.calls;
  };
  for (const auto& e : result.events()) {
    if (e.deviceType() == c10::DeviceType::CPU) {
      threads[e.startThreadId()].push_back({&e, e.startNs(), e.startNs() + e.durationNs()});
    } else {
      add(e, "cuda", e.durationNs());  // kernels and copies do not nest
    }
  }
  for (auto& [thread, spans] : threads) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;  // a parent before its first child
    });
    std::vector<Span*> open;
    for (Span& span : spans) {
      while (!open.empty() && open.back()->end <= span.start) open.pop_back();
      if (!open.empty()) open.back()->children += span.end - span.start;
      open.push_back(&span);
    }
    for (const Span& span : spans) {
      const uint64_t duration = span.end - span.start;
      add(*span.event, "cpu", duration > span.children ? duration - span.children : 0);
    }
  }
  std::vector<OperatorTime> ops;
  for (auto& [key, op] : totals) ops.push_back(std::move(op));
  std::sort(ops.begin(), ops.end(), [](const OperatorTime& a, const OperatorTime& b) { return a.self_ms > b.self_ms; });
  return ops;
}

ProfilerPolicy::ProfilerPolicy(ProfilerOptions options) : options_(std::move(options)) { options_.validate(); }

ProfilerPolicy::~ProfilerPolicy() {
  if (active_) kineto::disableProfiler();  // a fit ended by an exception
}

void ProfilerPolicy::on_fit_begin(const TrainingRun& run) {
  run_ = &run;
  participating_ = options_.all_ranks() || run.rank() == 0;
  dir_ = !options_.dir().empty()                ? fs::path(options_.dir())
         : !run.options().run_dir().empty() ? fs::path(run.options().run_dir()) / "profiles"
                                                : fs::path("profiles");
  last_capture_ = std::chrono::steady_clock::now();
  due_ = false;
  epoch_steps_ = 0;
}

void ProfilerPolicy::on_step_begin(StepContext& ctx) {
  if (ctx.first_in_epoch()) {
    epoch_steps_ = 0;
    if (options_.every_epoch()) due_ = true;
  }
  if (due_ && !active_ && participating_ && epoch_steps_ >= options_.skip_steps()) {
    due_ = false;
    steps_at_start_ = ctx.state().step + 1;
    start();
  }
}

void ProfilerPolicy::start() {
  std::set<ActivityType> activities{ActivityType::CPU};
  if (run_->device().is_cuda()) activities.insert(ActivityType::CUDA);
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO, options_.record_shapes());
  kineto::prepareProfiler(config, activities);
  kineto::enableProfiler(config, activities);
  active_ = true;
  recorded_steps_ = 0;
}

void ProfilerPolicy::on_step_end(StepContext& ctx) {
  ++epoch_steps_;
  if (active_ && ++recorded_steps_ >= options_.steps()) finish(ctx.state());
  if (!ctx.boundary() || active_) return;
  const TrainerState& s = ctx.state();
  if (options_.every_n_steps() > 0 && s.step % options_.every_n_steps() == 0) due_ = true;
  if (options_.every_n_minutes() > 0 &&
      std::chrono::steady_clock::now() - last_capture_ >= std::chrono::duration<double>(60.0 * options_.every_n_minutes())) {
    due_ = true;
  }
}

void ProfilerPolicy::on_fit_end(const TrainingRun& run) {
  if (active_) finish(run.state());
}

void ProfilerPolicy::finish(const TrainerState& state) {
  const auto started = std::chrono::steady_clock::now();
  if (run_->device().is_cuda()) torch::cuda::synchronize();  // the recorded steps' kernels are done
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  active_ = false;
  last_capture_ = std::chrono::steady_clock::now();
  fs::create_directories(dir_);
  const std::string stem = c10::str("step_", steps_at_start_, options_.all_ranks() ? c10::str("_rank", run_->rank()) : "");
  const fs::path trace = dir_ / (stem + ".trace.json");
  result->save(trace.string());
  traces_.push_back(trace);
  last_summary_ = operators_by_self_time(*result);

  double cpu_ms = 0, cuda_ms = 0, compute_bound_ms = 0;
  for (const auto& op : last_summary_) {
    (op.device == "cuda" ? cuda_ms : cpu_ms) += op.self_ms;
    if (op.device == "cuda" && is_compute_bound_kernel(op.name)) compute_bound_ms += op.self_ms;
  }
  std::ostringstream table;
  table << "profile of " << recorded_steps_ << " micro-steps from step " << steps_at_start_ << " (" << trace.string()
        << "): top operators by self time\n"
        << std::left << std::setw(8) << "device" << std::right << std::setw(12) << "self ms" << std::setw(8) << "share"
        << std::setw(12) << "total ms" << std::setw(8) << "calls" << "  name\n";
  const size_t shown = std::min<size_t>(last_summary_.size(), static_cast<size_t>(options_.top()));
  for (size_t i = 0; i < shown; ++i) {
    const OperatorTime& op = last_summary_[i];
    const double all = op.device == "cuda" ? cuda_ms : cpu_ms;
    table << std::left << std::setw(8) << op.device << std::right << std::fixed << std::setprecision(3) << std::setw(12)
          << op.self_ms << std::setprecision(1) << std::setw(7) << (all > 0 ? 100.0 * op.self_ms / all : 0.0) << "%"
          << std::setprecision(3) << std::setw(12) << op.total_ms << std::setw(8) << op.calls << "  " << op.name << "\n";
  }
  if (cuda_ms > 0) {
    table << "GPU time: " << std::setprecision(1) << 100.0 * compute_bound_ms / cuda_ms
          << "% matmul/convolution/attention kernels, " << 100.0 * (cuda_ms - compute_bound_ms) / cuda_ms
          << "% memory-bound kernels (elementwise, normalisation, reductions, copies)\n";
  }
  std::ofstream(dir_ / (stem + ".top.txt")) << table.str();
  log::info(table.str());
  const double overhead_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  run_->record("profile", {{"step", static_cast<double>(state.step)},
                               {"micro_steps", static_cast<double>(recorded_steps_)},
                               {"cpu_self_ms", cpu_ms},
                               {"cuda_ms", cuda_ms},
                               {"memory_bound_share", cuda_ms > 0 ? (cuda_ms - compute_bound_ms) / cuda_ms : 0.0},
                               {"top_self_ms", last_summary_.empty() ? 0.0 : last_summary_.front().self_ms},
                               {"export_ms", overhead_ms}});
}

}  // namespace frugal
