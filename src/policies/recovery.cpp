#include "frugal/policies/recovery.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "frugal/base/communicator.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"
#include "precision/bf16_support.hpp"

namespace frugal {

void RecoveryOptions::validate() const {
  auto at_least = [](const char* field, int64_t value, int64_t low) {
    if (value < low) throw OptionError(field, c10::str(field, " must be >= ", low, ", got ", value));
  };
  at_least("window", window(), 1);
  at_least("min_history", min_history(), 1);
  at_least("repeat_window", repeat_window(), 1);
  at_least("snapshot_every_n_steps", snapshot_every_n_steps(), 1);
  at_least("snapshots", snapshots(), 1);
  at_least("skip_batches", skip_batches(), 0);
  at_least("lr_window", lr_window(), 1);
  at_least("max_rollbacks", max_rollbacks(), 0);
  if (min_history() > window()) {
    throw OptionError("min_history", c10::str("min_history (", min_history(), ") must not exceed window (", window(), ")"));
  }
  if (!(spike_factor() == 0.0 || spike_factor() > 1.0)) {
    throw OptionError("spike_factor", c10::str("spike_factor must be > 1 (or 0 = off), got ", spike_factor()));
  }
  if (!(max_grad_norm() >= 0.0)) throw OptionError("max_grad_norm", c10::str("max_grad_norm must be >= 0, got ", max_grad_norm()));
  if (!(lr_factor() > 0.0 && lr_factor() < 1.0)) {
    throw OptionError("lr_factor", c10::str("lr_factor must be in (0, 1), got ", lr_factor()));
  }
}

// In-memory snapshots of good steps, oldest first, each with the loss history of its time: after
// a rollback the running median is that of the restored weights, not of the path abandoned.
struct RecoveryPolicy::Snapshots {
  struct Kept {
    std::shared_ptr<const TrainingSnapshot> snapshot;
    std::deque<double> history;
    DataPosition read_from;  // where the data read on the path from this snapshot began
  };
  std::deque<Kept> kept;
};

RecoveryPolicy::RecoveryPolicy(RecoveryOptions options)
    : options_(std::move(options)), snapshots_(std::make_unique<Snapshots>()) {
  options_.validate();
}

RecoveryPolicy::~RecoveryPolicy() = default;

void RecoveryPolicy::on_fit_begin(const TrainingRun& run) {
  run_ = &run;
  bf16_supported_ = detail::bf16_supported(run.device());
  // The state the fit starts from (a fresh model or a checkpoint) is the first good one.
  snapshots_->kept.clear();
  auto first = std::make_shared<const TrainingSnapshot>(run.snapshot());
  snapshots_->kept.push_back({first, history_, first->data});
  log::info(c10::str("recovery: on (spike > ", options_.spike_factor(), " x median of ", options_.window(),
                     " steps, snapshot every ", options_.snapshot_every_n_steps(), " steps, ", options_.max_rollbacks() - rollbacks_,
                     " rollbacks left)"));
}

void RecoveryPolicy::on_fit_end(const TrainingRun& run) {
  if (!gave_up_) return;
  std::string report;
  for (const auto& d : decisions_) report += "\n  " + d;
  // Added after the checkpoint policy (add_policies): its final checkpoint, of the rolled-back
  // good weights, is on disk by now.
  throw TrainingError(c10::str("recovery: gave up at step ", run.state().step, " after ", anomalies_, " anomalies and ",
                               rollbacks_, " rollbacks; ", run.last_checkpoint_text(), ". Decisions:", report));
}

void RecoveryPolicy::on_step_begin(StepContext& ctx) {
  // The Trainer keeps the ladder's precision request (also across rollbacks and in checkpoints);
  // a checkpoint of the ladder written before it did so asks again here.
  if (precision_override_ >= 0 && !ctx.standing().precision) {
    ctx.request_precision(static_cast<Precision>(precision_override_), "recovery: resumed after a switch");
  }
}

std::string RecoveryPolicy::judge(double loss, double norm) const {
  if (!std::isfinite(loss)) return c10::str("non-finite loss (", loss, ")");
  if (!std::isfinite(norm)) return c10::str("non-finite gradient norm (", norm, ")");
  if (options_.max_grad_norm() > 0 && norm > options_.max_grad_norm()) {
    return c10::str("gradient norm ", norm, " above ", options_.max_grad_norm());
  }
  if (options_.spike_factor() > 0 && static_cast<int64_t>(history_.size()) >= options_.min_history()) {
    std::vector<double> sorted(history_.begin(), history_.end());
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double median = sorted[sorted.size() / 2];
    if (loss > options_.spike_factor() * median) return c10::str("loss spike: ", loss, " > ", options_.spike_factor(), " x median ", median);
  }
  return "";
}

void RecoveryPolicy::before_optimizer_step(StepContext& ctx) {
  const torch::Tensor& step_loss = ctx.step_loss_sum();
  if (!step_loss.defined()) return;
  const auto micro_steps = static_cast<double>(ctx.step_micro_steps());
  ++seen_steps_;
  // The gradient norm: free when clipping by norm computed it; one pass over the gradients when
  // check_gradients or max_grad_norm asks for it.
  torch::Tensor norm = ctx.gradient_norm();
  if (!norm.defined() && (options_.check_gradients() || options_.max_grad_norm() > 0)) {
    {
      std::vector<torch::Tensor> grads;
      for (const auto& param : ctx.parameters()) {
        if (param.grad().defined()) grads.push_back(param.grad().detach());
      }
      // One fused pass over the gradients (no squared copies), then the norm of the norms.
      const torch::Tensor squares = grads.empty() ? torch::zeros({}, step_loss.options())
                                                  : torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat).pow(2).sum();
      norm = ctx.reduce_over_shards(squares).sqrt();  // the whole model's, with sharded gradients
    }
  }
  // The figures every rank judges alike: the loss averaged over the ranks, read once (the one
  // wait of the step); alone and without a norm, the loss sum itself.
  double loss = 0.0, grad_norm = 0.0;
  const int64_t ranks = run_->world_size();
  if (ranks == 1 && !norm.defined()) {
    loss = step_loss.item<double>() / micro_steps;  // the one wait of the step
  } else {
    torch::Tensor figures = torch::stack({step_loss / micro_steps,
                                          norm.defined() ? norm.to(step_loss.device()).to(torch::kFloat).reshape({}) : torch::zeros({}, step_loss.options())});
    if (ranks > 1) figures = run_->reduce_across_ranks(figures, ReduceOp::sum) / static_cast<double>(ranks);
    const torch::Tensor host = figures.to(torch::kDouble).cpu();
    loss = host.data_ptr<double>()[0];
    grad_norm = host.data_ptr<double>()[1];
  }

  if (last_anomaly_ >= 0 && seen_steps_ - last_anomaly_ > options_.repeat_window()) rung_ = 0;  // the episode is over
  const std::string why = judge(loss, grad_norm);
  if (why.empty()) {
    history_.push_back(loss);
    while (static_cast<int64_t>(history_.size()) > options_.window()) history_.pop_front();
    ctx.set_lr_factor(lr_factor());
    return;
  }
  ++anomalies_;
  ctx.cancel_step("recovery: " + why);
  if (!std::isfinite(loss)) ctx.discard_loss();
  const std::string did = climb(ctx, why);
  ctx.set_lr_factor(lr_factor());
  remember(c10::str("step ", ctx.state().step + 1, ": ", why, ": rung ", rung_, " (", did, ")"), loss, grad_norm);
}

std::string RecoveryPolicy::climb(StepContext& ctx, const std::string& why) {
  rung_ = (last_anomaly_ >= 0 && seen_steps_ - last_anomaly_ <= options_.repeat_window()) ? rung_ + 1 : 1;
  last_anomaly_ = seen_steps_;
  std::string did = "skipped the step";
  if (rung_ == 1) return did;
  // Rungs 2-5 roll back first; a rung that cannot act hands over to the next.
  if (rung_ == 3) {
    lr_until_ = seen_steps_ + options_.lr_window();
    did += c10::str(", learning rate x ", options_.lr_factor(), " for ", options_.lr_window(), " steps");
  }
  if (rung_ == 4 && !switch_precision(ctx, did)) rung_ = 5;
  if (!roll_back(ctx, did)) rung_ = 5;
  if (rung_ >= 5) {
    gave_up_ = true;
    did += ", stopped: " + why + " came back after every rung";
  }
  return did;
}

bool RecoveryPolicy::switch_precision(StepContext& ctx, std::string& did) {
  // Only with a precision policy, which says what it runs in.
  if (!options_.switch_precision() || !ctx.precision()) return false;
  const Precision now = *ctx.precision();
  if (now == Precision::fp32) return false;
  const Precision safer = now == Precision::fp16 && bf16_supported_ ? Precision::bf16 : Precision::fp32;
  precision_override_ = static_cast<int64_t>(safer);
  did += ", precision " + to_string(now) + " -> " + to_string(safer);
  // Applied by the precision policy at the next step's start, after the rollback's restore.
  ctx.request_precision(safer, c10::str("recovery: rung 4 at step ", ctx.state().step + 1));
  return true;
}

bool RecoveryPolicy::roll_back(StepContext& ctx, std::string& did) {
  if (rollbacks_ >= options_.max_rollbacks() || snapshots_->kept.empty()) {
    did += rollbacks_ >= options_.max_rollbacks() ? c10::str(", no rollback left (", rollbacks_, " taken)") : ", no snapshot to roll back to";
    return false;
  }
  const auto& to = snapshots_->kept.front().snapshot;
  history_ = snapshots_->kept.front().history;
  // The batches read since the snapshot led here: read on after them (and skip_batches more).
  DataPosition resume = run_->data_position();
  resume.batch_index += options_.skip_batches();
  if (resume.batch_index >= run_->batches_per_epoch()) resume = {resume.epoch + 1, 0, resume.seed, resume.batch_size};
  // Skipped: what was read on this path since the snapshot (not what an earlier rollback skipped).
  DataPosition& from = snapshots_->kept.front().read_from;
  skipped_.push_back({from.epoch, from.batch_index, resume.epoch, resume.batch_index});
  from = resume;
  ++rollbacks_;
  ignore_next_load_ = true;
  ctx.roll_back(to, resume);
  const SkippedData& skipped = skipped_.back();
  did += c10::str(", rolled back to step ", to->state.step, ", skipping batches ", skipped.from_batch, " of epoch ", skipped.from_epoch,
                  " to before ", resume.batch_index, " of epoch ", resume.epoch);
  // Snapshots newer than the one returned to are of the path that led here.
  while (snapshots_->kept.size() > 1) snapshots_->kept.pop_back();
  return true;
}

void RecoveryPolicy::remember(const std::string& decision, double loss, double norm) {
  decisions_.push_back(decision);
  log::warn("recovery: " + decision);
  const SkippedData last = skipped_.empty() ? SkippedData{} : skipped_.back();
  run_->record("recovery", {{"step", static_cast<double>(run_->state().step + 1)},
                                {"rung", static_cast<double>(rung_)},
                                {"loss", loss},
                                {"grad_norm", norm},
                                {"rollbacks", static_cast<double>(rollbacks_)},
                                {"skipped_from_epoch", static_cast<double>(last.from_epoch)},
                                {"skipped_from_batch", static_cast<double>(last.from_batch)},
                                {"skipped_to_epoch", static_cast<double>(last.to_epoch)},
                                {"skipped_to_batch", static_cast<double>(last.to_batch)},
                                {"lr_factor", lr_factor()},
                                {"gave_up", gave_up_ ? 1.0 : 0.0}});
}

void RecoveryPolicy::on_step_end(StepContext& ctx) {
  if (!ctx.boundary() || ctx.step_cancelled() || ctx.rollback()) return;
  // A snapshot of a good step, away from any anomaly, every snapshot_every_n_steps.
  const bool calm = last_anomaly_ < 0 || seen_steps_ - last_anomaly_ > options_.repeat_window();
  if (!calm || seen_steps_ % options_.snapshot_every_n_steps() != 0) return;
  auto snapshot = std::make_shared<const TrainingSnapshot>(run_->snapshot());
  snapshots_->kept.push_back({snapshot, history_, snapshot->data});
  while (static_cast<int64_t>(snapshots_->kept.size()) > options_.snapshots()) snapshots_->kept.pop_front();
}

std::optional<std::string> RecoveryPolicy::should_stop(const TrainerState&) {
  if (!gave_up_) return std::nullopt;
  return c10::str("gave up after ", anomalies_, " anomalies and ", rollbacks_, " rollbacks (", decisions_.back(), ")");
}

double RecoveryPolicy::lr_factor() const {
  return seen_steps_ < lr_until_ ? options_.lr_factor() : 1.0;
}

void RecoveryPolicy::collect_metrics(Metrics& metrics) {
  metrics["recovery_anomalies"] = static_cast<double>(anomalies_);
  metrics["recovery_rollbacks"] = static_cast<double>(rollbacks_);
  metrics["recovery_rung"] = static_cast<double>(rung_);
}

void RecoveryPolicy::save_state(StateDict& state) const {
  state["ladder"] = torch::tensor({seen_steps_, rung_, last_anomaly_, anomalies_, rollbacks_, lr_until_, precision_override_,
                                   static_cast<int64_t>(gave_up_)});
  state["history"] = torch::tensor(std::vector<double>(history_.begin(), history_.end()), torch::kDouble);
  std::vector<int64_t> flat;
  for (const auto& s : skipped_) flat.insert(flat.end(), {s.from_epoch, s.from_batch, s.to_epoch, s.to_batch});
  state["skipped"] = torch::tensor(flat, torch::kLong).reshape({-1, 4});
}

void RecoveryPolicy::load_state(const StateDict& state) {
  if (ignore_next_load_) {  // the Trainer restoring a rollback's snapshot: the ladder goes on
    ignore_next_load_ = false;
    return;
  }
  auto it = state.find("ladder");
  if (it == state.end()) return;  // a checkpoint written without the ladder: start it fresh
  const torch::Tensor ladder = it->second.to(torch::kLong).contiguous();
  if (ladder.numel() != 8) throw CheckpointError(c10::str("policy/recovery/ladder has ", ladder.numel(), " values, expected 8"));
  const int64_t* v = ladder.data_ptr<int64_t>();
  seen_steps_ = v[0], rung_ = v[1], last_anomaly_ = v[2], anomalies_ = v[3], rollbacks_ = v[4], lr_until_ = v[5];
  precision_override_ = v[6], gave_up_ = v[7] != 0;
  if (precision_override_ < -1 || precision_override_ > static_cast<int64_t>(Precision::bf16)) {
    throw CheckpointError(c10::str("policy/recovery/ladder names precision ", precision_override_, ", which does not exist"));
  }
  history_.clear();
  if (auto h = state.find("history"); h != state.end()) {
    const torch::Tensor values = h->second.to(torch::kDouble).contiguous().reshape({-1});
    history_.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
  }
  skipped_.clear();
  if (auto s = state.find("skipped"); s != state.end() && s->second.numel() > 0) {
    const torch::Tensor rows = s->second.to(torch::kLong).contiguous().reshape({-1, 4});
    for (int64_t i = 0; i < rows.size(0); ++i) {
      const int64_t* r = rows[i].data_ptr<int64_t>();
      skipped_.push_back({r[0], r[1], r[2], r[3]});
    }
  }
}

}  // namespace frugal
