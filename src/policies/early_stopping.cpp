#include "frugal/policies/early_stopping.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "frugal/log.hpp"

namespace frugal {

void EarlyStoppingOptions::validate() const {
  if (patience() < 1) throw OptionError("patience", c10::str("patience must be >= 1, got ", patience()));
  if (min_delta() < 0) throw OptionError("min_delta", c10::str("min_delta must be >= 0, got ", min_delta()));
  if (grace_evaluations() < 0) {
    throw OptionError("grace_evaluations", c10::str("grace_evaluations must be >= 0, got ", grace_evaluations()));
  }
}

EarlyStoppingPolicy::EarlyStoppingPolicy(EarlyStoppingOptions options)
    : options_(std::move(options)),
      best_(options_.mode() == MonitorMode::min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity()) {
  options_.validate();
}

void EarlyStoppingPolicy::on_validation_end(const TrainerState& state, const Metrics& metrics) {
  auto it = metrics.find(options_.monitor());
  if (it == metrics.end()) {
    std::string known;
    for (const auto& [name, value] : metrics) known += (known.empty() ? "" : ", ") + name;
    throw TrainingError("early stopping monitors '" + options_.monitor() + "' but validation reported only: " + known);
  }
  const double value = it->second;
  const bool min = options_.mode() == MonitorMode::min;
  ++evaluations_;
  const std::string where = c10::str(options_.monitor(), " = ", value, " at step ", state.step);
  if (options_.check_finite() && !std::isfinite(value)) {
    reason_ = where + " is not finite";
  } else if (!std::isnan(options_.stopping_threshold()) &&
             (min ? value <= options_.stopping_threshold() : value >= options_.stopping_threshold())) {
    reason_ = c10::str(where, " reached the stopping threshold ", options_.stopping_threshold());
  } else if (!std::isnan(options_.divergence_threshold()) &&
             (min ? value > options_.divergence_threshold() : value < options_.divergence_threshold())) {
    reason_ = c10::str(where, " is past the divergence threshold ", options_.divergence_threshold());
  }
  const bool improved = min ? value < best_ - options_.min_delta() : value > best_ + options_.min_delta();
  if (improved) {
    best_ = value;
    wait_ = 0;
  } else {
    ++wait_;
    if (!reason_ && wait_ >= options_.patience()) {
      reason_ = c10::str(where, ": no improvement over the best ", best_, " by more than ", options_.min_delta(), " for ",
                         wait_, " evaluations (patience ", options_.patience(), ")");
    }
  }
  if (reason_ && evaluations_ <= options_.grace_evaluations()) {
    log::info(c10::str("early stopping would stop (", *reason_, ") but is in its grace period (", evaluations_, " of ",
                       options_.grace_evaluations(), " evaluations)"));
    reason_.reset();
  }
}

std::optional<std::string> EarlyStoppingPolicy::should_stop(const TrainerState&) { return reason_; }

void EarlyStoppingPolicy::save_state(StateDict& state) const {
  state["best"] = torch::tensor(best_, torch::kDouble);
  state["wait"] = torch::tensor(wait_);
  state["evaluations"] = torch::tensor(evaluations_);
}

void EarlyStoppingPolicy::load_state(const StateDict& state) {
  if (auto it = state.find("best"); it != state.end()) best_ = it->second.item<double>();
  if (auto it = state.find("wait"); it != state.end()) wait_ = it->second.item<int64_t>();
  if (auto it = state.find("evaluations"); it != state.end()) evaluations_ = it->second.item<int64_t>();
}

}  // namespace frugal
