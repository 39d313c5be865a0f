#include "frugal/core/trainer.hpp"

#include <c10/util/StringUtil.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include "core/detail/fit_scopes.hpp"
#include "core/detail/loss_window.hpp"
#include "core/detail/nonfinite_watch.hpp"
#include "core/detail/oom_safety_net.hpp"
#include "core/detail/step_line.hpp"
#include "frugal/base/storage_bytes.hpp"
#include "frugal/core/run_lock.hpp"
#include "frugal/distributed/communicator.hpp"
#include "frugal/distributed/optimizer_shards.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;

namespace {
// max_steps, or a pause's step or epoch, reached (or already reached by the checkpoint a run
// resumed from): the fit stops. Epochs count at their ends (a fit stopped mid-epoch stays in it).
void stop_at_max_steps(const TrainerOptions& options, TrainerState& state) {
  if (state.stop_reason) return;
  if (options.max_steps() > 0 && state.step >= options.max_steps()) {
    state.stop_reason = c10::str("reached max_steps=", options.max_steps());
  } else if (options.pause_at_step() > 0 && state.step >= options.pause_at_step()) {
    state.stop_reason = c10::str("paused at step ", state.step, " (trainer.pause_at_step=", options.pause_at_step(), ")");
  } else if (options.pause_at_epoch() > 0 && state.epoch >= options.pause_at_epoch() && state.epoch < options.max_epochs()) {
    state.stop_reason = c10::str("paused after epoch ", state.epoch, " (trainer.pause_at_epoch=", options.pause_at_epoch(), ")");
  }
}
}  // namespace

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
  loss_window_ = std::make_unique<detail::LossWindow>();
  oom_net_ = std::make_unique<detail::OomSafetyNet>();
  nonfinite_ = std::make_unique<detail::NonFiniteWatch>(options_.stop_on_nonfinite_loss());
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

double Trainer::samples_per_s() const { return loss_window_->last().samples_per_s; }

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
  // After every policy of its phase or an earlier one: the order is the phases' (policy.hpp).
  const auto at = std::find_if(policies_.begin(), policies_.end(), [&](const auto& p) { return p->phase() > policy->phase(); });
  policies_.insert(at, std::move(policy));
}

void Trainer::set_resume_source(std::shared_ptr<ResumeSource> source) {
  if (!source) throw OptionError("resume_source", "Trainer::set_resume_source: the source is null");
  if (resume_source_) throw OptionError("resume_source", "Trainer::set_resume_source: a resume source was already set");
  resume_source_ = std::move(source);
}

void Trainer::replicate(Replication replication) {
  if (!replication.communicator) throw OptionError("replication", "Trainer::replicate: the communicator is null");
  if (held_gradients_ || world_size() > 1) throw OptionError("replication", "Trainer::replicate: the Trainer replicates already");
  if (state_.micro_step > 0) throw TrainingError("Trainer::replicate: only before training starts");
  const int64_t replicas = train_loader_.options().num_replicas();
  const int64_t world = replication.communicator->world_size();
  if (replicas != 1 && replicas != world) {
    throw OptionError("num_replicas", c10::str("data num_replicas is ", replicas, " but the world has ", world,
                                               " ranks: leave it at 1, the Trainer shards"));
  }
  communicator_ = std::move(replication.communicator);
  train_loader_.shard(world_size(), rank());
  if (validation_loader_) validation_loader_->shard(world_size(), rank());
  if (replication.optimizer_shards) {
    replication.optimizer_shards->attach(model_.module(), *optimizer_);
    shards_ = std::move(replication.optimizer_shards);
  }
  held_gradients_ = replication.held_gradients ? std::move(replication.held_gradients) : [] { return std::vector<torch::Tensor>{}; };
}

bool Trainer::any_rank(bool local) const { return world_size() > 1 ? communicator_->any(local) : local; }

torch::Tensor Trainer::reduce_across_ranks(const torch::Tensor& values, ReduceOp op) const {
  if (world_size() == 1) return values;
  // On the training device (NCCL reduces only CUDA tensors), into a copy: the caller's stays.
  std::vector<torch::Tensor> tensors{values.to(device_).contiguous().clone()};
  communicator_->all_reduce(tensors, op);
  return tensors[0];
}

std::shared_ptr<const ShardingInfo> Trainer::optimizer_sharding() const { return shards_ ? shards_->info() : nullptr; }

int64_t Trainer::gradient_bytes() const {
  std::vector<torch::Tensor> grads;
  for (const auto& p : model_.module().parameters()) grads.push_back(p.grad());
  for (const auto& group : optimizer_->param_groups()) {  // a sharded optimizer's pieces
    for (const auto& p : group.params()) grads.push_back(p.grad());
  }
  if (held_gradients_) {
    for (auto& held : held_gradients_()) grads.push_back(std::move(held));  // data-parallel buckets
  }
  return storage_bytes(grads);
}

FitResult Trainer::fit() {
  const auto fit_start = std::chrono::steady_clock::now();
  const double copy_waits_before = copy_fence_->waited_seconds();
  detail::LogFileScope train_log;
  const detail::CpuMemoryCacheScope cpu_memory_cache(options_.cpu_memory_cache());
  if (!options_.run_dir().empty()) {
    const std::filesystem::path run_dir(options_.run_dir());
    std::filesystem::create_directories(run_dir);
    if (rank() == 0) {  // one log and one metrics file per run, not per process
      lock_run_directory(run_dir);  // held already when start_program took it
      train_log.open(run_dir / "train.log");
      metrics_log_ = MetricsLog(run_dir / "metrics.jsonl", options_.tensorboard() ? run_dir / "tensorboard" : fs::path());
    }
  }
  resume();
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
  loss_window_->open(train_loader_.wait_seconds());

  // Said if the communication library ends the process from a thread of its own.
  set_failure_context([this] { return c10::str("during step ", state_.step + 1, "; ", last_checkpoint_text()); });
  struct ClearFailureContext {
    ~ClearFailureContext() { set_failure_context({}); }
  } clear_failure_context;
  // Leaving, also by an error: no staged snapshot reads the weights once the caller has them back.
  struct AwaitStagedCopies {
    SnapshotCopyFence& fence;
    ~AwaitStagedCopies() { fence.wait(); }
  } await_staged_copies{*copy_fence_};
  // A run resumed from a checkpoint taken at max_steps (its final one) has nothing left to train.
  stop_at_max_steps(options_, state_);
  try {
    while (!stopping() && state_.epoch < options_.max_epochs()) {
      train_epoch();
      if (!train_loader_.has_next()) ++state_.epoch;  // a fit stopped mid-epoch stays in it
      stop_at_max_steps(options_, state_);
    }
  } catch (const CommunicationError& e) {  // said with where the run is and where to resume from
    throw CommunicationError(c10::str(e.what(), " (during step ", state_.step + 1, "; ", last_checkpoint_text(), ")"));
  }
  if (loss_window_->has_steps()) log_training();
  check_finite("the end of the fit", /*weights=*/false);  // before a final checkpoint

  for (auto& p : policies_) p->on_fit_end(*this);
  FitResult result;
  result.state = state_;
  result.train_loss = loss_window_->last().loss;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start).count();
  result.staged_copy_wait_seconds = copy_fence_->waited_seconds() - copy_waits_before;
  // Of the whole job: every rank reads an equal share.
  result.samples_per_second = static_cast<double>((state_.samples_seen - samples_at_start) * world_size()) /
                              std::max(1e-9, result.seconds);
  log::info(c10::str("fit done: ", state_.step, " steps (", state_.skipped_steps, " skipped), ", state_.epoch,
                     " epochs, ", result.seconds, " s",
                     result.staged_copy_wait_seconds > 0 ? c10::str(" (", result.staged_copy_wait_seconds, " s of it waiting for checkpoint copies)") : "",
                     state_.stop_reason ? ", stopped: " + *state_.stop_reason : ""));
  return result;
}

void Trainer::train_epoch() {
  // A resumed run continues mid-epoch: only rewind when the loader is not already there.
  const DataPosition pos = train_loader_.position();
  if (pos.epoch != state_.epoch || !train_loader_.has_next()) train_loader_.start_epoch(state_.epoch);
  model_.module().train();
  bool first = true;
  while (!stopping() && train_loader_.has_next()) {
    const bool last = train_loader_.next_is_last();
    batch_position_ = train_loader_.position();
    const Batch batch = train_loader_.next()->to(device_, /*non_blocking=*/true);
    train_micro_step(batch, last, first);
    first = false;
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

void Trainer::train_micro_step(const Batch& batch, bool last_in_epoch, bool first_in_epoch) {
  StepContext ctx(state_, batch, model_.module(), *optimizer_, last_in_epoch);
  ctx.set_first_in_epoch(first_in_epoch);
  ctx.set_micro_batch_change(std::exchange(micro_batch_change_, std::nullopt));
  ctx.set_standing(standing_);

  // 1. Step begin: policies may declare this micro-step a non-boundary (accumulation).
  for (auto& p : policies_) p->on_step_begin(ctx);
  // 2-4. Forward and loss, loss transforms, backward; the step's loss summed.
  forward_backward(ctx, batch);
  if (ctx.boundary()) {
    // A checkpoint's staged snapshot of the last step copies beside this step's forward and
    // backward; from here on the weights and the optimizer's state change.
    copy_fence_->wait();
    // 5. Gradient reduction across replicas (timed: the communication share of the step).
    const auto reduce_start = std::chrono::steady_clock::now();
    for (auto& p : policies_) p->reduce_gradients(ctx);
    loss_window_->add_reduce_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_start).count());
    // A window that some rank could not finish is dropped on every rank, and run again.
    if (window_dropped()) return;
    // 6-8. Unscale and overflow check, then clipping on true gradients, then a last veto.
    for (auto& p : policies_) if (!ctx.step_cancelled()) p->unscale_gradients(ctx);
    for (auto& p : policies_) if (!ctx.step_cancelled()) p->clip_gradients(ctx);
    for (auto& p : policies_) if (!ctx.step_cancelled()) p->before_optimizer_step(ctx);
    // 9. Optimizer step and LR schedule, unless cancelled.
    optimizer_step(ctx);
    for (auto& p : policies_) p->on_after_optimizer_step(ctx);
    optimizer_->zero_grad(/*set_to_none=*/true);
  }
  // 10. Bookkeeping (counters, the loss window, logging, validation, max_steps), then the
  // policies: a checkpoint taken here includes this step's validation.
  bookkeeping(ctx, batch.size());
  for (auto& p : policies_) p->on_step_end(ctx);
  standing_ = ctx.standing();
  if (ctx.rollback()) roll_back(*ctx.rollback());
  if (ctx.boundary()) maybe_stop();
}

void Trainer::forward_backward(StepContext& ctx, const Batch& batch) {
  oom_net_->begin_micro_step(ctx, [&] {  // the window's start, to run it again from
    return detail::WindowStart{batch_position_, state_.micro_step, state_.samples_seen, loss_window_->mark()};
  });
  // With the out-of-memory safety net armed, a rank that ran out of memory skips the rest of its
  // window but still plays its part at the boundary.
  bool transformed = false;
  if (!oom_net_->skipping()) {
    try {
      forward_loss_backward(ctx, batch, transformed);
    } catch (const c10::OutOfMemoryError& e) {
      if (!oom_net_->armed()) throw;
      oom_net_->out_of_memory(e, batch.size(), state_.step + 1);
    } catch (const c10::Error& e) {  // LibTorch's words ("Target 7 is out of bounds"), said of this batch
      throw TrainingError(c10::str("step ", state_.step + 1, ", ", describe_batch(batch), ": forward/backward failed: ", message_of(e)));
    }
  }
  if (oom_net_->skipping()) oom_net_->stand_in(ctx, policies_, device_, transformed);
  // The step's loss, summed once for everyone (the policies, the non-finite watch, the log window).
  loss_window_->add_loss(ctx);
}

void Trainer::forward_loss_backward(StepContext& ctx, const Batch& batch, bool& transformed) {
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
}

void Trainer::optimizer_step(const StepContext& ctx) {
  ++state_.step;
  if (ctx.step_cancelled()) {
    ++state_.skipped_steps;
    log::debug(c10::str("step ", state_.step, " skipped: ", *ctx.cancel_reason()));
  } else {
    optimizer_->step();
  }
  standing_ = ctx.standing();
  apply_lr_schedule();  // also after a skipped step: a policy may have changed its factor
  nonfinite_->end_step(state_.step, ctx.step_cancelled(), ctx.step_loss_sum());
}

void Trainer::bookkeeping(const StepContext& ctx, int64_t samples) {
  ++state_.micro_step;
  state_.samples_seen += samples;
  loss_window_->end_micro_step(ctx, samples);
  if (!ctx.boundary()) return;
  if (state_.step % options_.log_every_n_steps() == 0) log_training();
  if (options_.validate_every_n_steps() > 0 && validation_loader_ && state_.step % options_.validate_every_n_steps() == 0) {
    validate();
    model_.module().train();
  }
  stop_at_max_steps(options_, state_);
}

void Trainer::apply_lr_schedule() {
  const double policies_factor = standing_.lr_factor;
  // Without a schedule or a policy's factor the groups' rates are left as the user set them.
  if (!lr_schedule_ && policies_factor == 1.0 && applied_lr_factor_ == 1.0) return;
  applied_lr_factor_ = policies_factor;
  const double factor = (lr_schedule_ ? lr_schedule_(state_.optimizer_steps()) : 1.0) * policies_factor;
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(base_lrs_[i] * factor);
  state_.lr = base_lrs_.empty() ? 0.0 : base_lrs_.front() * factor;
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
  if (any_rank(reason.has_value()) && !reason) reason = "another rank stopped the run";
  if (!reason) return;
  state_.stop_reason = std::move(reason);
  log::info("stopping: " + *state_.stop_reason);
}

}  // namespace frugal
