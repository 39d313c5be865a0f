#include "frugal/policies/smoke_test.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <chrono>
#include <map>

#include "detail/op_trail.hpp"
#include "base/finite_weights.hpp"
#include "base/resident_memory.hpp"
#include "frugal/core/probe_step.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"

namespace frugal {

void SmokeTestOptions::validate() const {
  if (batches() < 1) throw OptionError("batches", c10::str("batches must be >= 1, got ", batches()));
}

std::string SmokeTestReport::to_string() const {
  std::string s = passed ? c10::str("smoke test passed: ", batches_run, " batches on CPU")
                         : c10::str("smoke test FAILED in ", phase, " after ", batches_run, " good batches: ", error);
  if (!failing_op.empty()) {
    s += c10::str("\n  failing op: ", failing_op);
    for (const auto& in : op_inputs) s += "\n    input " + in;
  }
  if (!failing_module.empty()) s += "\n  module: " + failing_module;
  if (!batch_shapes.empty()) {
    s += "\n  batch:";
    for (const auto& b : batch_shapes) s += " " + b + ";";
  }
  s += c10::str("\n  step time ", step_ms, " ms, peak resident memory ", peak_rss_bytes / (1024 * 1024),
                " MiB (+", peak_rss_growth_bytes / (1024 * 1024), " MiB during the test)");
  return s;
}

SmokeTestFailed::SmokeTestFailed(SmokeTestReport report)
    : Error(report.to_string()), report_(std::move(report)) {}

namespace {

// Keeps the global CPU RNG exactly as it was, so the real run draws the same random numbers
// (dropout masks, initialisations) whether or not the smoke test ran.
class CpuRngRestorer {
 public:
  CpuRngRestorer() : generator_(at::detail::getDefaultCPUGenerator()), state_(generator_.get_state()) {}
  ~CpuRngRestorer() { generator_.set_state(state_); }

 private:
  at::Generator generator_;  // a handle sharing the global generator
  at::Tensor state_;
};

std::vector<std::string> describe_batch(const Batch& batch) {
  std::vector<std::string> shapes;
  if (batch.input.defined()) shapes.push_back("input " + detail::describe(batch.input));
  if (batch.target.defined()) shapes.push_back("target " + detail::describe(batch.target));
  for (const auto& [name, t] : batch.extra) {
    if (t.defined()) shapes.push_back(name + " " + detail::describe(t));
  }
  return shapes;
}

// Fills the failing op, its inputs and the module they belong to from the op trail.
void explain_failure(const std::vector<detail::OpRecord>& trail, torch::nn::Module& module, SmokeTestReport& report) {
  if (trail.empty()) return;
  std::map<const void*, std::string> parameter_of_storage;
  for (const auto& p : module.named_parameters()) {
    if (p.value().has_storage()) {
      parameter_of_storage.emplace(p.value().storage().unsafeGetStorageImpl(),
                                   p.key() + " " + detail::describe(p.value()));
    }
  }
  const detail::OpRecord& innermost = trail.back();
  report.failing_op = innermost.name;
  for (size_t i = 0; i < innermost.inputs.size(); ++i) {
    auto it = parameter_of_storage.find(innermost.input_storages[i]);
    report.op_inputs.push_back(innermost.inputs[i] + (it != parameter_of_storage.end() ? " (parameter " + it->second + ")" : ""));
  }
  // Innermost op first: the module is the owner of the first parameter found.
  for (auto op = trail.rbegin(); op != trail.rend() && report.failing_module.empty(); ++op) {
    for (const void* storage : op->input_storages) {
      auto it = parameter_of_storage.find(storage);
      if (it == parameter_of_storage.end()) continue;
      const std::string param = it->second.substr(0, it->second.find(' '));
      const auto dot = param.rfind('.');
      report.failing_module = dot == std::string::npos ? c10::str("(root ", module.name(), ")")
                                                       : param.substr(0, dot);
      break;
    }
  }
}

// The first parameter whose value (or gradient, with `grads`) holds a NaN or an infinity, or "".
std::string first_nonfinite_parameter(torch::nn::Module& module, bool grads) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : module.named_parameters()) named.emplace_back(p.key(), grads ? p.value().grad() : p.value());
  return detail::first_nonfinite(named).value_or("");
}

// Names a non-finite value the batch produced, as the module that holds it.
[[noreturn]] void nonfinite(SmokeTestReport& report, const std::string& parameter, const std::string& what) {
  const auto dot = parameter.rfind('.');
  if (!parameter.empty()) report.failing_module = dot == std::string::npos ? parameter : parameter.substr(0, dot);
  throw NonFiniteError(what);
}

}  // namespace

SmokeTestReport run_smoke_test(const TrainingRun& run, const SmokeTestOptions& options) {
  options.validate();
  SmokeTestReport report;
  CpuRngRestorer rng_restorer;
  const torch::Device cpu(torch::kCPU);
  detail::reset_peak_resident();
  const int64_t resident_at_start = detail::resident_bytes();

  report.phase = "copy";
  try {
    Model copy = run.model().copy_to(cpu);
    copy.module().train();
    std::unique_ptr<torch::optim::Optimizer> optimizer = run.optimizer_factory()(copy.module());
    DataLoaderOptions data_options = run.data_options();
    data_options.shuffle(false).num_replicas(1).rank(0);
    DataLoader loader(std::shared_ptr<const Dataset>(&run.train_data(), [](const Dataset*) {}), data_options);

    detail::OpTrail trail;
    double total_ms = 0.0;
    ProbeStepOptions step;
    step.on_phase = [&](ProbePhase phase) { report.phase = to_string(phase); };
    int64_t i = 0;
    // A NaN or infinity is a failure like a shape error: the real run would train on it.
    step.after_phase = [&](ProbePhase phase, const torch::Tensor& loss) {
      if (phase == ProbePhase::forward && !loss.isfinite().all().item<bool>()) {
        nonfinite(report, "", c10::str("the loss of batch ", i, " is ", loss.item<double>(), " (NaN or infinity in the data, or a model that overflows)"));
      }
      if (phase == ProbePhase::backward) {
        if (const std::string p = first_nonfinite_parameter(copy.module(), true); !p.empty()) {
          nonfinite(report, p, c10::str("the gradient of ", p, " is not finite on batch ", i));
        }
      }
      if (phase == ProbePhase::optimizer_step) {
        if (const std::string p = first_nonfinite_parameter(copy.module(), false); !p.empty()) {
          nonfinite(report, p, c10::str("parameter ", p, " is not finite after the optimizer step of batch ", i,
                                        " (is the learning rate too high?)"));
        }
      }
    };
    for (; i < options.batches(); ++i) {
      report.phase = "data";
      auto batch = loader.next();
      if (!batch) {
        if (i == 0) throw TrainingError("the training data yields no batch");
        break;  // fewer batches than asked: what ran is the test
      }
      *batch = batch->to(cpu);  // datasets that make batches on the GPU (decoding there, synthetic images)
      report.batch_shapes = describe_batch(*batch);
      const auto start = std::chrono::steady_clock::now();
      trail.clear();
      try {
        probe_step(copy, *optimizer, *batch, step);
      } catch (const NonFiniteError&) {
        throw;
      } catch (const std::exception&) {
        explain_failure(trail.last_trail(), copy.module(), report);
        throw;
      }
      total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      ++report.batches_run;
    }
    report.passed = true;
    report.phase.clear();
    report.step_ms = total_ms / static_cast<double>(std::max<int64_t>(1, report.batches_run));
  } catch (const c10::Error& e) {
    report.error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  report.peak_rss_bytes = detail::peak_resident_bytes();
  report.peak_rss_growth_bytes = std::max<int64_t>(0, report.peak_rss_bytes - resident_at_start);
  return report;
}

SmokeTestPolicy::SmokeTestPolicy(SmokeTestOptions options) : options_(std::move(options)) { options_.validate(); }

void SmokeTestPolicy::on_fit_begin(const TrainingRun& run) {
  SmokeTestMode mode = options_.mode();
  if (mode == SmokeTestMode::automatic) mode = run.device().is_cpu() ? SmokeTestMode::off : SmokeTestMode::fail;
  if (mode == SmokeTestMode::off) return;
  report_ = run_smoke_test(run, options_);
  ran_ = true;
  if (report_.passed) {
    log::info(report_.to_string());
  } else if (mode == SmokeTestMode::warn) {
    log::warn(report_.to_string() + "\n  (smoke_test.mode=warn: the run goes on)");
  } else {
    log::error(report_.to_string());
    throw SmokeTestFailed(report_);
  }
}

}  // namespace frugal
