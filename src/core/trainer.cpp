#include "frugal/core/trainer.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/StringUtil.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/detail/nonfinite_watch.hpp"
#include "core/detail/oom_safety_net.hpp"
#include "core/detail/step_line.hpp"
#include "frugal/core/cpu_memory_cache.hpp"
#include "frugal/core/run_lock.hpp"
#include "frugal/distributed/communicator.hpp"
#include "frugal/distributed/optimizer_shards.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;

torch::Device resolve_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  try {
    torch::Device device(name);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      throw OptionError("trainer.device", "trainer.device '" + name + "' was asked for but CUDA is not available here");
    }
    return device;
  } catch (const c10::Error&) {
    throw OptionError("trainer.device", "trainer.device must be auto, cpu, cuda or cuda:N, got '" + name + "'");
  }
}

Trainer::Trainer(Model model, OptimizerFactory make_optimizer, std::shared_ptr<const Dataset> train_data,
                 TrainerOptions options, DataLoaderOptions data_options)
    : model_(std::move(model)),
      make_optimizer_(std::move(make_optimizer)),
      options_(std::move(options)),
      train_loader_(std::move(train_data), data_options),
      communicator_(std::make_shared<SingleProcessCommunicator>()),
      device_(torch::kCPU) {
  options_.validate();
  oom_net_ = std::make_unique<detail::OomSafetyNet>(options_.halve_batch_on_oom());
  nonfinite_ = std::make_unique<detail::NonFiniteWatch>();
  step_line_ = std::make_unique<detail::StepLine>();
  if (!make_optimizer_) throw OptionError("make_optimizer", "Trainer: an optimizer factory is required");
  device_ = resolve_device(options_.device());
  // On CUDA: pinned batches, copied to the device by the loader's workers on side streams ahead
  // of their step (without workers, pinned batches copied asynchronously by the step).
  if (device_.is_cuda()) train_loader_.copy_ahead_to(device_);
  // The optimizer is built after the move so its state lives with the parameters.
  model_.module().to(device_);
  optimizer_ = make_optimizer_(model_.module());
  if (!optimizer_) throw OptionError("make_optimizer", "Trainer: the optimizer factory returned null");
  for (auto& group : optimizer_->param_groups()) base_lrs_.push_back(group.options().get_lr());
  state_.lr = base_lrs_.empty() ? 0.0 : base_lrs_.front();
}

Trainer::~Trainer() = default;

int64_t Trainer::rank() const { return communicator_->rank(); }
int64_t Trainer::world_size() const { return communicator_->world_size(); }

void Trainer::set_validation_data(std::shared_ptr<const Dataset> data) {
  DataLoaderOptions opts = train_loader_.options();
  // Each rank validates its own share, with no example twice; the sums are added across ranks.
  opts.shuffle(false).drop_last(false).num_replicas(world_size()).rank(rank()).even_shards(false);
  if (options_.validation_batch_size() > 0) opts.batch_size(options_.validation_batch_size());
  validation_loader_ = std::make_unique<DataLoader>(std::move(data), opts);
  if (device_.is_cuda()) validation_loader_->copy_ahead_to(device_);
}

void Trainer::set_batch_size(int64_t batch_size) {
  if (state_.micro_step > 0) throw TrainingError("Trainer::set_batch_size: the batch size is fixed once training has started");
  train_loader_.set_batch_size(batch_size);
}

double Trainer::progress() const {
  double done = static_cast<double>(state_.micro_step) /
                std::max<double>(1.0, static_cast<double>(options_.max_epochs() * train_loader_.batches_per_epoch()));
  if (options_.max_steps() > 0) done = std::max(done, static_cast<double>(state_.step) / static_cast<double>(options_.max_steps()));
  return std::min(1.0, done);
}

void Trainer::set_lr_schedule(LrSchedule schedule) {
  lr_schedule_ = std::move(schedule);
  apply_lr_schedule();
}

void Trainer::add_policy(std::shared_ptr<Policy> policy) {
  if (!policy) throw OptionError("policy", "Trainer::add_policy: policy is null");
  for (const auto& p : policies_) {
    if (p->name() == policy->name()) {
      throw OptionError("policy", "Trainer::add_policy: a policy named '" + policy->name() + "' was already added");
    }
  }
  if (auto communicator = policy->communicator()) {
    for (const auto& p : policies_) {
      if (p->communicator()) {
        throw OptionError("policy", "Trainer::add_policy: '" + policy->name() +
                                        "' brings a communicator but another policy already did ('" +
                                        p->name() + "')");
      }
    }
    const int64_t replicas = train_loader_.options().num_replicas();
    if (replicas != 1 && replicas != communicator->world_size()) {
      throw OptionError("num_replicas", c10::str("data num_replicas is ", replicas, " but the world has ",
                                                 communicator->world_size(), " ranks: leave it at 1, the Trainer shards"));
    }
    communicator_ = std::move(communicator);
    train_loader_.shard(world_size(), rank());
    if (validation_loader_) validation_loader_->shard(world_size(), rank());
  }
  if (auto shards = policy->optimizer_shards()) {
    if (shards_) throw OptionError("policy", "Trainer::add_policy: '" + policy->name() + "' shards the optimizer but another policy already does");
    if (state_.micro_step > 0) throw TrainingError("Trainer::add_policy: the optimizer can only be sharded before training starts");
    shards->attach(model_.module(), *optimizer_);
    shards_ = std::move(shards);
  }
  policies_.push_back(std::move(policy));
}

FitResult Trainer::fit() {
  const auto fit_start = std::chrono::steady_clock::now();
  // The run's train.log stops receiving messages when the fit ends, also when it ends by an exception.
  bool file_sink_open = false;
  struct CloseSink {
    bool& open;
    ~CloseSink() {
      if (open) log::remove_file_sink();
    }
  } close_sink{file_sink_open};
  // The CPU memory cache, on for the fit if it is not on already, and emptied when the fit ends.
  struct CpuMemoryCacheScope {
    bool owned = false;
    explicit CpuMemoryCacheScope(bool wanted) {
      if (wanted && !cpu_memory_cache_enabled()) {
        enable_cpu_memory_cache();
        owned = cpu_memory_cache_enabled();
      }
    }
    ~CpuMemoryCacheScope() {
      if (owned) disable_cpu_memory_cache();
    }
  } cpu_memory_cache_scope{options_.cpu_memory_cache()};
  if (!options_.run_dir().empty()) {
    const std::filesystem::path run_dir(options_.run_dir());
    std::filesystem::create_directories(run_dir);
    if (rank() == 0) {  // one log and one metrics file per run, not per process
      lock_run_directory(run_dir);  // held already when start_program took it
      log::add_file_sink(run_dir / "train.log");
      file_sink_open = true;
      metrics_log_ = MetricsLog(run_dir / "metrics.jsonl", options_.tensorboard() ? run_dir / "tensorboard" : fs::path());
    }
  }
  // The newest snapshot a policy offers that restores on every rank; on a failure, the next older.
  for (auto& p : policies_) {
    bool resumed = false;
    while (auto snapshot = p->resume_from(*this)) {
      std::string failure;
      try {
        restore(*snapshot);
      } catch (const std::exception& e) {
        failure = message_of(e);
        log::warn(failure);
      }
      if (!communicator_->any(!failure.empty())) {
        resumed = true;
        break;
      }
      p->resume_failed(failure.empty() ? "another rank could not restore it (see its log)" : failure);
    }
    if (resumed) break;
  }
  if (options_.halve_batch_on_oom() &&
      std::none_of(policies_.begin(), policies_.end(), [](const auto& p) { return p->name() == "gradient_accumulation"; })) {
    throw OptionError("halve_batch_on_oom", "halve_batch_on_oom needs a GradientAccumulationPolicy to keep the effective batch");
  }
  if (train_loader_.batches_per_epoch() == 0) {
    throw TrainingError(c10::str("no training batch: the training set has ", train_loader_.dataset().size(), " examples, ",
                                 "and batches of ", train_loader_.options().batch_size(), " per rank on ", world_size(),
                                 " rank(s)", train_loader_.options().drop_last() ? " with drop_last" : "",
                                 " leave none; lower data.batch_size or turn off data.drop_last"));
  }
  for (auto& p : policies_) p->on_fit_begin(*this);
  log::info(c10::str("fit: ", model_.module().name(), " on ", device_, ", ", train_loader_.batches_per_epoch(),
                     " batches/epoch of ", train_loader_.options().batch_size(), ", up to ", options_.max_epochs(),
                     " epochs", options_.max_steps() > 0 ? c10::str(" / ", options_.max_steps(), " steps") : ""));
  // What a step and an epoch hold, for tools that read metrics.jsonl (frugal-sweep's cost per epoch).
  record("fit", {{"step", static_cast<double>(state_.step)},
                 {"batch_size", static_cast<double>(train_loader_.options().batch_size())},
                 {"world_size", static_cast<double>(world_size())},
                 {"samples_per_epoch", static_cast<double>(train_loader_.batches_per_epoch() * train_loader_.options().batch_size() * world_size())}});
  const int64_t samples_at_start = state_.samples_seen;
  optimizer_->zero_grad(/*set_to_none=*/true);
  window_start_ = std::chrono::steady_clock::now();
  window_data_wait_start_ = train_loader_.wait_seconds();
  window_reduce_seconds_ = 0.0;

  // Said if the communication library ends the process from a thread of its own.
  set_failure_context([this] { return c10::str("during step ", state_.step + 1, "; ", last_checkpoint_text()); });
  struct ClearFailureContext {
    ~ClearFailureContext() { set_failure_context({}); }
  } clear_failure_context;
  try {
    while (!stopping() && state_.epoch < options_.max_epochs()) {
      train_epoch();
      if (!train_loader_.has_next()) ++state_.epoch;  // a fit stopped mid-epoch stays in it
    }
  } catch (const CommunicationError& e) {  // said with where the run is and where to resume from
    throw CommunicationError(c10::str(e.what(), " (during step ", state_.step + 1, "; ", last_checkpoint_text(), ")"));
  }
  if (window_micro_steps_ > 0) log_training();
  check_finite("the end of the fit", /*weights=*/false);  // before a final checkpoint

  for (auto& p : policies_) p->on_fit_end(*this);
  FitResult result;
  result.state = state_;
  result.train_loss = last_window_loss_;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start).count();
  // Of the whole job: every rank reads an equal share.
  result.samples_per_second = static_cast<double>((state_.samples_seen - samples_at_start) * world_size()) /
                              std::max(1e-9, result.seconds);
  log::info(c10::str("fit done: ", state_.step, " steps (", state_.skipped_steps, " skipped), ", state_.epoch,
                     " epochs, ", result.seconds, " s", state_.stop_reason ? ", stopped: " + *state_.stop_reason : ""));
  return result;
}

void Trainer::train_epoch() {
  // A resumed run continues mid-epoch: only rewind when the loader is not already there.
  const DataPosition pos = train_loader_.position();
  if (pos.epoch != state_.epoch || !train_loader_.has_next()) train_loader_.start_epoch(state_.epoch);
  for (auto& p : policies_) p->on_epoch_begin(state_);
  model_.module().train();
  while (!stopping() && train_loader_.has_next()) {
    if (oom_net_->needs_mark()) {
      oom_net_->mark({train_loader_.position(), state_.micro_step, state_.samples_seen, window_micro_steps_, window_samples_,
                      window_loss_sum_.defined() ? window_loss_sum_.clone() : torch::Tensor()});
    }
    const bool last = train_loader_.next_is_last();
    batch_in_epoch_ = train_loader_.position().batch_index;
    const Batch batch = train_loader_.next()->to(device_, /*non_blocking=*/true);
    train_micro_step(batch, last);
  }
  // Validation first, so epoch-end hooks (a checkpoint keeping the best) see its metrics.
  const bool epoch_done = !train_loader_.has_next();
  if (epoch_done && options_.validate_every_epoch() && validation_loader_ && validated_at_step_ != state_.step) {
    validate();
  }
  if (epoch_done) {
    for (auto& p : policies_) p->on_epoch_end(state_);
  }
}

std::string Trainer::last_checkpoint_text() const {
  for (const auto& p : policies_) {
    if (auto last = p->last_checkpoint()) return "the last good checkpoint is " + *last;
  }
  return "no checkpoint was written before it";
}

std::string Trainer::describe_batch(const Batch& batch) const {
  std::string out = c10::str("epoch ", state_.epoch, ", batch ", batch_in_epoch_, " of ", train_loader_.batches_per_epoch(),
                             world_size() > 1 ? c10::str(" on rank ", rank()) : std::string());
  const std::vector<int64_t> examples = train_loader_.examples_of(batch_in_epoch_);
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

void Trainer::train_micro_step(const Batch& batch, bool last_in_epoch) {
  StepContext ctx(state_, batch, model_.module(), *optimizer_, last_in_epoch);

  // 1. Step begin: policies may declare this micro-step a non-boundary (accumulation).
  for (auto& p : policies_) p->on_step_begin(ctx);

  // 2-4. Forward and loss, loss transforms, backward. With the out-of-memory safety net, a rank
  // that ran out of memory skips the rest of its window but still plays its part at the boundary.
  bool transformed = false;
  if (!oom_net_->skipping()) {
    try {
      forward_backward(ctx, batch, transformed);
    } catch (const c10::OutOfMemoryError& e) {
      if (!oom_net_->enabled()) throw;
      oom_net_->out_of_memory(e, batch.size(), state_.step + 1);
    } catch (const c10::Error& e) {  // LibTorch's words ("Target 7 is out of bounds"), said of this batch
      throw TrainingError(c10::str("step ", state_.step + 1, ", ", describe_batch(batch), ": forward/backward failed: ", message_of(e)));
    }
  }
  if (oom_net_->skipping()) oom_net_->stand_in(ctx, policies_, device_, transformed);
  // The step's loss, summed once for everyone (the policies, the non-finite watch, the log
  // window): one fp32 scalar per optimizer step (the loss may be bf16 under autocast).
  if (step_loss_sum_.defined()) {
    step_loss_sum_.add_(ctx.loss());
  } else {
    step_loss_sum_ = ctx.loss().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
  ++step_micro_steps_;
  ctx.set_step_loss(step_loss_sum_, step_micro_steps_);

  if (ctx.boundary()) {
    // 5. Gradient reduction across replicas (timed: the communication share of the step).
    const auto reduce_start = std::chrono::steady_clock::now();
    for (auto& p : policies_) p->reduce_gradients(ctx);
    window_reduce_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_start).count();
    // One decision for all ranks: any rank out of memory drops the window everywhere.
    if (oom_net_->window_failed(*communicator_)) {
      halve_after_oom();
      return;
    }
    // 6-8. Unscale and overflow check, then clipping on true gradients, then a last veto.
    for (auto& p : policies_) if (!ctx.step_cancelled()) p->unscale_gradients(ctx);
    for (auto& p : policies_) if (!ctx.step_cancelled()) p->clip_gradients(ctx);
    for (auto& p : policies_) if (!ctx.step_cancelled()) p->before_optimizer_step(ctx);
    // 9. Optimizer step and LR schedule, unless cancelled.
    ++state_.step;
    if (ctx.step_cancelled()) {
      ++state_.skipped_steps;
      log::debug(c10::str("step ", state_.step, " skipped: ", *ctx.cancel_reason()));
    } else {
      optimizer_->step();
    }
    apply_lr_schedule();  // also after a skipped step: a policy may have changed its factor
    if (options_.stop_on_nonfinite_loss()) nonfinite_->end_step(state_.step, ctx.step_cancelled(), step_loss_sum_);
    for (auto& p : policies_) p->on_after_optimizer_step(ctx);
    optimizer_->zero_grad(/*set_to_none=*/true);
  }

  // 10. Bookkeeping: counters, the loss window, logging, validation, stopping.
  ++state_.micro_step;
  state_.samples_seen += batch.size();
  window_samples_ += batch.size();
  if (ctx.boundary()) {
    if (!ctx.loss_discarded()) {  // the step's losses join the log window
      if (window_loss_sum_.defined()) {
        window_loss_sum_.add_(step_loss_sum_);
      } else {  // a copy: the non-finite watch keeps the step's own until it reads it
        window_loss_sum_ = step_loss_sum_.clone();
      }
      window_micro_steps_ += step_micro_steps_;
    }
    step_loss_sum_ = torch::Tensor();
    step_micro_steps_ = 0;
    if (state_.step % options_.log_every_n_steps() == 0) log_training();
    if (options_.validate_every_n_steps() > 0 && validation_loader_ &&
        state_.step % options_.validate_every_n_steps() == 0) {
      validate();
      model_.module().train();
    }
    if (options_.max_steps() > 0 && state_.step >= options_.max_steps() && !stopping()) {
      state_.stop_reason = c10::str("reached max_steps=", options_.max_steps());
    }
  }
  // After the bookkeeping, so a checkpoint taken here includes this step's validation.
  for (auto& p : policies_) p->on_step_end(ctx);
  if (ctx.rollback()) roll_back(*ctx.rollback());
  if (ctx.boundary()) maybe_stop();
}

void Trainer::roll_back(const StepContext::Rollback& rollback) {
  optimizer_->zero_grad(/*set_to_none=*/true);
  restore(*rollback.to);
  DataPosition at = rollback.resume_at;
  if (at.batch_index >= train_loader_.batches_per_epoch()) at = {at.epoch + 1, 0, at.seed, at.batch_size};
  train_loader_.restore(at);
  state_.epoch = at.epoch;
  step_loss_sum_ = torch::Tensor();
  step_micro_steps_ = 0;
  log::info(c10::str("rolled back to step ", state_.step, "; reading on at epoch ", at.epoch, ", batch ", at.batch_index));
  for (auto& p : policies_) p->on_rolled_back(state_);
}

void Trainer::forward_backward(StepContext& ctx, const Batch& batch, bool& transformed) {
  // 2. Forward and loss, inside every policy's forward scope (autocast).
  torch::Tensor loss;
  {
    std::vector<std::unique_ptr<ForwardGuard>> guards;
    for (auto& p : policies_) {
      if (auto guard = p->forward_guard(state_, Phase::train)) guards.push_back(std::move(guard));
    }
    loss = model_.loss(batch);
  }
  ctx.set_loss(loss.detach());

  // 3. Loss transforms, in policy order (1/N for accumulation, then the loss scale).
  for (auto& p : policies_) loss = p->transform_loss(ctx, std::move(loss));
  transformed = true;

  // 4. Backward; gradients add up across the micro-steps of one boundary.
  loss.backward();
  for (auto& p : policies_) p->on_after_backward(ctx);
}

void Trainer::change_micro_batch(int64_t new_size) {
  const int64_t old_size = train_loader_.options().batch_size();
  train_loader_.set_batch_size(new_size);
  for (auto& p : policies_) p->on_micro_batch_changed(*this, old_size, new_size);
}

void Trainer::halve_after_oom() {
  const int64_t old_size = train_loader_.options().batch_size();
  if (old_size < 2) throw TrainingError("out of memory with a micro-batch of 1 example: nothing is left to halve");
  const detail::WindowStart start = oom_net_->rewind();
  optimizer_->zero_grad(/*set_to_none=*/true);
  model_.module().zero_grad(/*set_to_none=*/true);  // a sharded optimizer's pieces are not the parameters
  if (device_.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
  // The window never happened: counters back to its start, its data read again in halves.
  state_.micro_step = start.micro_step;
  state_.samples_seen = start.samples_seen;
  window_micro_steps_ = start.window_micro_steps;
  window_samples_ = start.window_samples;
  window_loss_sum_ = start.window_loss_sum;
  step_loss_sum_ = torch::Tensor();
  step_micro_steps_ = 0;
  const int64_t new_size = old_size / 2;
  change_micro_batch(new_size);
  const int64_t first_example = start.position.batch_index * old_size;
  if (first_example % new_size != 0) {
    log::warn(c10::str("micro-batch ", old_size, " is odd: ", first_example % new_size, " examples of the epoch are read twice"));
  }
  train_loader_.restore({start.position.epoch, first_example / new_size, start.position.seed, new_size});
  log::warn(c10::str("out of memory: every rank runs step ", state_.step + 1, " again with micro-batches of ", new_size,
                     " (was ", old_size, ")"));
  record("out_of_memory", {{"step", static_cast<double>(state_.step)}, {"micro_batch", static_cast<double>(new_size)}});
}

void Trainer::apply_lr_schedule() {
  double policies_factor = 1.0;
  for (const auto& p : policies_) policies_factor *= p->lr_factor(state_);
  // Without a schedule or a policy's factor the groups' rates are left as the user set them.
  if (!lr_schedule_ && policies_factor == 1.0 && lr_factor_ == 1.0) return;
  lr_factor_ = policies_factor;
  const double factor = (lr_schedule_ ? lr_schedule_(state_.optimizer_steps()) : 1.0) * policies_factor;
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(base_lrs_[i] * factor);
  state_.lr = base_lrs_.empty() ? 0.0 : base_lrs_.front() * factor;
}

void Trainer::log_training() {
  // Loss and throughput of the whole job: summed across ranks (every rank logs at the same step).
  const double data_wait = train_loader_.wait_seconds() - window_data_wait_start_;
  const std::vector<double> window =
      sum_across_ranks({window_loss_sum_.defined() ? window_loss_sum_.item<double>() : 0.0, static_cast<double>(window_micro_steps_),
                        static_cast<double>(window_samples_), data_wait, window_reduce_seconds_});
  // nan when every step of the window had its loss discarded (the recovery ladder's skips)
  const double loss = window[1] > 0 ? window[0] / window[1] : std::nan("");
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - window_start_).count();
  const double samples_per_s = window[2] / std::max(1e-9, seconds);
  // Time the loop spent waiting for its next batch: per micro-step, and as a share of the
  // window (mean over ranks). Near 0 means the data pipeline keeps up.
  const double data_wait_ms = 1000.0 * window[3] / window[1];
  const double data_wait_fraction = window[3] / static_cast<double>(world_size()) / std::max(1e-9, seconds);
  // The rest of the window split into communication (host time in gradient reduction; with
  // overlap most of it hides in backward) and compute.
  const double communication_fraction = window[4] / static_cast<double>(world_size()) / std::max(1e-9, seconds);
  const double compute_fraction = std::max(0.0, 1.0 - data_wait_fraction - communication_fraction);
  last_window_loss_ = loss;
  last_window_samples_per_s_ = samples_per_s;
  std::vector<std::pair<std::string, double>> fields{{"step", static_cast<double>(state_.step)},
                                                     {"epoch", static_cast<double>(state_.epoch)},
                                                     {"loss", loss},
                                                     {"lr", state_.lr},
                                                     {"samples_per_s", samples_per_s},
                                                     {"data_wait_ms", data_wait_ms},
                                                     {"data_wait_fraction", data_wait_fraction},
                                                     {"communication_fraction", communication_fraction},
                                                     {"compute_fraction", compute_fraction},
                                                     {"skipped_steps", static_cast<double>(state_.skipped_steps)},
                                                     {"samples_seen", static_cast<double>(state_.samples_seen * world_size())}};
  Metrics extra;
  for (auto& p : policies_) p->collect_metrics(extra);
  for (const auto& [name, value] : extra) fields.emplace_back(name, value);
  metrics_log_.write("train", fields);
  log::info(step_line_->format({state_.step, state_.epoch, loss, state_.lr, samples_per_s, data_wait_fraction}, extra));
  window_loss_sum_ = torch::Tensor();
  window_micro_steps_ = 0;
  window_samples_ = 0;
  window_start_ = now;
  window_data_wait_start_ = train_loader_.wait_seconds();
  window_reduce_seconds_ = 0.0;
  check_finite(c10::str("the log line of step ", state_.step), /*weights=*/false);  // the loss was just read: no extra wait
}

void Trainer::check_finite(const std::string& at, bool weights) const {
  if (!options_.stop_on_nonfinite_loss()) return;
  const std::optional<detail::NonFiniteWatch::Finding> loss = nonfinite_->first();
  std::string weight;  // the first non-finite parameter's name
  if (weights && !loss) {
    const auto named = model_.module().named_parameters();
    std::vector<torch::Tensor> finite;
    finite.reserve(named.size());
    for (const auto& p : named) finite.push_back(p.value().isfinite().all());
    if (!finite.empty() && !torch::stack(finite).all().item<bool>()) {
      for (size_t i = 0; i < finite.size(); ++i) {
        if (!finite[i].item<bool>()) {
          weight = named[i].key();
          break;
        }
      }
    }
  }
  const bool here = loss.has_value() || !weight.empty();
  if (!communicator_->any(here)) return;
  std::string what = loss     ? c10::str("a non-finite training loss (", std::isnan(loss->loss) ? "nan" : loss->loss > 0 ? "inf" : "-inf", ") at step ", loss->step)
                     : here   ? c10::str("non-finite weights at step ", state_.step, " (parameter ", weight, ")")
                              : c10::str("another rank saw a non-finite loss or weights by step ", state_.step, " (see its log)");
  throw NonFiniteError(c10::str(what, "; the run stops at ", at, "; ", last_checkpoint_text(),
                                ". Lower the learning rate, check the data, or use bf16/fp16 loss scaling; "
                                "trainer.stop_on_nonfinite_loss=false trains on regardless"));
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

void Trainer::maybe_stop() {
  if (stopping()) return;  // max_steps: reached on every rank at the same step
  // Every policy is asked, also after one gave a reason, so that collectives inside should_stop
  // run on every rank alike; then the ranks agree, so that all stop at the same step.
  std::optional<std::string> reason;
  for (auto& p : policies_) {
    auto why = p->should_stop(state_);
    if (why && !reason) reason = p->name() + ": " + *why;
  }
  if (world_size() > 1 && communicator_->any(reason.has_value()) && !reason) reason = "another rank stopped the run";
  if (!reason) return;
  state_.stop_reason = std::move(reason);
  log::info("stopping: " + *state_.stop_reason);
}

std::vector<double> Trainer::sum_across_ranks(std::vector<double> values) const {
  if (world_size() == 1) return values;
  // On the training device: NCCL reduces only CUDA tensors.
  std::vector<torch::Tensor> tensors{torch::tensor(values, torch::kDouble).to(device_)};
  communicator_->all_reduce(tensors);
  const torch::Tensor host = tensors[0].cpu();
  std::copy_n(host.data_ptr<double>(), values.size(), values.begin());
  return values;
}

}  // namespace frugal
