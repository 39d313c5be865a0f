// What the run reports: the training log line, validation, the non-finite check, records, and
// where in the data an error happened.
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "base/finite_weights.hpp"
#include "core/detail/loss_window.hpp"
#include "core/detail/nonfinite_watch.hpp"
#include "core/detail/step_line.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {

void Trainer::log_training() {
  const detail::LossWindow::Figures f =
      loss_window_->close(train_loader_.wait_seconds(), world_size(), [this](std::vector<double> v) { return sum_across_ranks(std::move(v)); });
  std::vector<std::pair<std::string, double>> fields{{"step", static_cast<double>(state_.step)},
                                                     {"epoch", static_cast<double>(state_.epoch)},
                                                     {"loss", f.loss},
                                                     {"lr", state_.lr},
                                                     {"samples_per_s", f.samples_per_s},
                                                     {"data_wait_ms", f.data_wait_ms},
                                                     {"data_wait_fraction", f.data_wait_fraction},
                                                     {"communication_fraction", f.communication_fraction},
                                                     {"compute_fraction", f.compute_fraction},
                                                     {"skipped_steps", static_cast<double>(state_.skipped_steps)},
                                                     {"samples_seen", static_cast<double>(state_.samples_seen * world_size())}};
  Metrics extra;
  for (auto& p : policies_) p->collect_metrics(extra);
  for (const auto& [name, value] : extra) fields.emplace_back(name, value);
  metrics_log_.write("train", fields);
  log::info(step_line_->format({state_.step, state_.epoch, f.loss, state_.lr, f.samples_per_s, f.data_wait_fraction}, extra));
  check_finite(c10::str("the log line of step ", state_.step), /*weights=*/false);  // the loss was just read: no extra wait
}

void Trainer::check_finite(const std::string& at, bool weights) const {
  if (!nonfinite_->enabled()) return;
  const std::optional<detail::NonFiniteWatch::Finding> loss = nonfinite_->first();
  std::string weight;  // the first non-finite parameter's name
  if (weights && !loss) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : model_.module().named_parameters()) named.emplace_back(p.key(), p.value());
    weight = detail::first_nonfinite(named).value_or("");
  }
  const bool here = loss.has_value() || !weight.empty();
  if (!communicator_->any(here)) return;
  std::string what = loss     ? c10::str("a non-finite training loss (", std::isnan(loss->loss) ? "nan" : loss->loss > 0 ? "inf" : "-inf", ") at step ", loss->step)
                     : here   ? c10::str("non-finite weights at step ", state_.step, " (parameter ", weight, ")")
                              : c10::str("another rank saw a non-finite loss or weights by step ", state_.step, " (see its log)");
  throw NonFiniteError(detail::nonfinite_stop_message(what, at, last_checkpoint_text()));
}

void Trainer::record(const std::string& event, const std::vector<std::pair<std::string, double>>& fields) const {
  metrics_log_.write(event, fields);
}

Metrics Trainer::validate() {
  if (!validation_loader_) throw TrainingError("Trainer::validate: no validation data was set");
  if (validation_loader_->dataset().size() < world_size()) {
    throw TrainingError(c10::str("the validation set has ", validation_loader_->dataset().size(),
                                 " examples, fewer than the ", world_size(), " ranks that share it"));
  }
  torch::NoGradGuard no_grad;
  model_.module().eval();
  std::map<std::string, torch::Tensor> sums;
  int64_t examples = 0;
  validation_loader_->start_epoch(0);
  while (auto batch = validation_loader_->next()) {
    const Batch on_device = batch->to(device_, /*non_blocking=*/true);
    BatchMetrics metrics;
    {
      std::vector<std::unique_ptr<ForwardGuard>> guards;
      for (auto& p : policies_) {
        if (auto guard = p->forward_guard(state_, Phase::validate)) guards.push_back(std::move(guard));
      }
      metrics = model_.metrics(on_device);
    }
    const auto n = static_cast<double>(on_device.size());
    for (auto& [name, value] : metrics) {
      torch::Tensor weighted = value.detach().to(torch::kDouble).mean() * n;
      auto it = sums.find(name);
      if (it == sums.end()) {
        sums.emplace(name, weighted);
      } else {
        it->second += weighted;
      }
    }
    examples += on_device.size();
  }
  validated_at_step_ = state_.step;
  // One collective for all the sums and the example count (names are sorted alike on every rank).
  std::vector<double> parts;
  for (auto& [name, sum] : sums) parts.push_back(sum.item<double>());
  parts.push_back(static_cast<double>(examples));
  const std::vector<double> totals = sum_across_ranks(std::move(parts));
  const double total_examples = std::max(1.0, totals.back());
  Metrics result;
  size_t i = 0;
  for (auto& [name, sum] : sums) result[name] = totals[i++] / total_examples;
  state_.last_validation = result;

  std::vector<std::pair<std::string, double>> fields{{"step", static_cast<double>(state_.step)},
                                                     {"epoch", static_cast<double>(state_.epoch)}};
  std::string text;
  for (const auto& [name, value] : result) {
    fields.emplace_back(name, value);
    text += c10::str(" ", name, " ", value);
  }
  metrics_log_.write("validation", fields);
  log::info(c10::str("validation at step ", state_.step, ":", text));
  for (auto& p : policies_) p->on_validation_end(state_, result);
  maybe_stop();
  return result;
}

std::string Trainer::describe_batch(const Batch& batch) const {
  const int64_t batch_in_epoch = batch_position_.batch_index;
  std::string out = c10::str("epoch ", state_.epoch, ", batch ", batch_in_epoch, " of ", train_loader_.batches_per_epoch(),
                             world_size() > 1 ? c10::str(" on rank ", rank()) : std::string());
  const std::vector<int64_t> examples = train_loader_.examples_of(batch_in_epoch);
  if (!examples.empty()) {
    out += " (dataset examples ";
    for (size_t i = 0; i < examples.size() && i < 8; ++i) out += c10::str(i ? ", " : "", examples[i]);
    out += examples.size() > 8 ? c10::str(", ... ", examples.size(), " in all)") : std::string(")");
  }
  const torch::Tensor& t = batch.target;
  if (t.defined() && t.numel() > 0 && !t.is_floating_point() && !t.is_complex()) {
    out += c10::str(", targets ", t.min().item<int64_t>(), "..", t.max().item<int64_t>());
  }
  return out;
}

std::vector<double> Trainer::sum_across_ranks(std::vector<double> values) const {
  if (world_size() == 1) return values;
  const torch::Tensor host = reduce_across_ranks(torch::tensor(values, torch::kDouble), ReduceOp::sum).cpu();
  std::copy_n(host.data_ptr<double>(), values.size(), values.begin());
  return values;
}

std::string Trainer::last_checkpoint_text() const {
  const std::optional<std::string> last = resume_source_ ? resume_source_->last_checkpoint() : std::nullopt;
  return last ? "the last good checkpoint is " + *last : "no checkpoint was written before it";
}

}  // namespace frugal
