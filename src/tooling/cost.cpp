#include "frugal/tooling/cost.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"

namespace frugal {

void CostOptions::validate() const {
  if (!(price_per_device_hour() >= 0)) {
    throw OptionError("price_per_device_hour", c10::str("price_per_device_hour must be >= 0, got ", price_per_device_hour()));
  }
  if (devices() < 0) throw OptionError("devices", c10::str("devices must be >= 0 (0 = the world size), got ", devices()));
  if (!(budget() >= 0)) throw OptionError("budget", c10::str("budget must be >= 0, got ", budget()));
  if (!(hard_budget() >= 0)) throw OptionError("hard_budget", c10::str("hard_budget must be >= 0, got ", hard_budget()));
  if ((budget() > 0 || hard_budget() > 0) && price_per_device_hour() == 0) {
    throw OptionError("price_per_device_hour", "a budget needs price_per_device_hour > 0 to count against");
  }
  fractions();
}

std::vector<double> CostOptions::fractions() const {
  std::vector<double> result;
  std::stringstream in(alert_fractions());
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    size_t used = 0;
    double f = 0;
    try {
      f = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" \t", used) != std::string::npos || !(f > 0)) {
      throw OptionError("alert_fractions", "alert_fractions must be positive numbers separated by commas, got '" +
                                               alert_fractions() + "'");
    }
    result.push_back(f);
  }
  std::sort(result.begin(), result.end());
  return result;
}

CostPolicy::CostPolicy(CostOptions options, std::function<double()> clock)
    : options_(std::move(options)), clock_(std::move(clock)) {
  options_.validate();
  fractions_ = options_.budget() > 0 ? options_.fractions() : std::vector<double>{};
  if (!clock_) {
    clock_ = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  }
}

void CostPolicy::on_fit_begin(const TrainingRun& run) {
  run_ = &run;
  devices_ = static_cast<double>(options_.devices() > 0 ? options_.devices() : run.world_size());
  fit_start_ = clock_();
  progress_at_start_ = progress();
  epoch_start_cost_ = cost();
  // A resumed run does not repeat the alerts its earlier part raised.
  while (alerts_fired_ < fractions_.size() && cost() >= fractions_[alerts_fired_] * options_.budget()) ++alerts_fired_;
  log::info(c10::str("cost: ", devices_, " devices at ", options_.price_per_device_hour(), " ", options_.currency(),
                     "/device-hour = ", burn_rate(), " ", options_.currency(), "/hour",
                     earlier_seconds_ > 0 ? c10::str(", ", cost(), " spent before this resume") : "",
                     options_.budget() > 0 ? c10::str(", budget ", options_.budget()) : "",
                     options_.hard_budget() > 0 ? c10::str(", hard stop at ", options_.hard_budget()) : ""));
}

double CostPolicy::seconds() const { return earlier_seconds_ + (run_ ? clock_() - fit_start_ : 0.0); }
double CostPolicy::burn_rate() const { return options_.price_per_device_hour() * devices_; }
double CostPolicy::cost() const { return seconds() / 3600.0 * burn_rate(); }

double CostPolicy::progress() const { return run_ ? run_->progress() : 0.0; }

double CostPolicy::projected_cost() const {
  const double done_here = progress() - progress_at_start_;
  if (!run_ || done_here <= 0) return cost();
  const double fit_seconds = clock_() - fit_start_;
  const double remaining = fit_seconds / done_here * (1.0 - progress());
  return (seconds() + remaining) / 3600.0 * burn_rate();
}

void CostPolicy::on_step_begin(StepContext& ctx) {
  if (ctx.first_in_epoch()) epoch_start_cost_ = cost();
}

void CostPolicy::on_epoch_end(const TrainerState& state) {
  const double epoch_cost = cost() - epoch_start_cost_;
  run_->record("cost", {{"step", static_cast<double>(state.step)},
                            {"epoch", static_cast<double>(state.epoch)},
                            {"epoch_cost", epoch_cost},
                            {"cost", cost()},
                            {"projected_cost", projected_cost()}});
  log::info(c10::str("cost: epoch ", state.epoch, " cost ", epoch_cost, " ", options_.currency(), ", ", cost(),
                     " so far, projected ", projected_cost(), " for the run"));
}

void CostPolicy::check_alerts() {
  while (alerts_fired_ < fractions_.size() && cost() >= fractions_[alerts_fired_] * options_.budget()) {
    const double fraction = fractions_[alerts_fired_++];
    const TrainerState& s = run_->state();
    log::warn(c10::str("budget alert: ", cost(), " ", options_.currency(), " spent, ",
                       static_cast<int64_t>(std::lround(100 * fraction)), "% of the budget of ", options_.budget(),
                       "; projected ", projected_cost(), " for the run, at step ", s.step));
    run_->record("budget_alert", {{"step", static_cast<double>(s.step)},
                                      {"fraction", fraction},
                                      {"cost", cost()},
                                      {"budget", options_.budget()},
                                      {"projected_cost", projected_cost()}});
  }
}

std::optional<std::string> CostPolicy::should_stop(const TrainerState& /*state*/) {
  if (!run_) return std::nullopt;
  check_alerts();
  // The Trainer spreads a stop to every rank at this same step (clocks differ slightly).
  if (options_.hard_budget() > 0 && cost() >= options_.hard_budget()) {
    return c10::str("hard budget reached: ", cost(), " ", options_.currency(), " spent of ", options_.hard_budget());
  }
  return std::nullopt;
}

void CostPolicy::collect_metrics(Metrics& metrics) {
  metrics["cost"] = cost();
  metrics["burn_rate_per_hour"] = burn_rate();
  metrics["projected_cost"] = projected_cost();
}

void CostPolicy::save_state(StateDict& state) const {
  state["seconds"] = torch::tensor(seconds(), torch::kDouble);
}

void CostPolicy::load_state(const StateDict& state) {
  auto it = state.find("seconds");
  if (it != state.end()) earlier_seconds_ = it->second.item<double>();
}

}  // namespace frugal
