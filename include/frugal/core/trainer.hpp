#pragma once
// The Trainer runs the training loop over any LibTorch module. Its step sequence lives in one
// function, train_micro_step(), written as numbered steps; every efficiency feature is a
// Policy hooked into that sequence (see policy.hpp for the hook order). Policies see it as a
// TrainingRun; services are handed to it: a resume source and replication.
//
//   frugal::Trainer trainer(model, [](torch::nn::Module& m) {
//     return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(1e-3));
//   }, train_data, frugal::TrainerOptions().max_epochs(3), frugal::DataLoaderOptions().batch_size(64));
//   trainer.set_validation_data(val_data);
//   trainer.add_policy(std::make_shared<frugal::SmokeTestPolicy>());
//   frugal::FitResult result = trainer.fit();

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "frugal/base/snapshot.hpp"
#include "frugal/core/lr_schedule.hpp"
#include "frugal/core/metrics_log.hpp"
#include "frugal/core/model.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/core/resume_source.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/core/trainer_options.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/data/data_loader.hpp"

namespace frugal {

class OptimizerShards;

namespace detail {
class LossWindow;
class NonFiniteWatch;
class OomSafetyNet;
class StepLine;
}

struct FitResult {
  TrainerState state;            // counters at the end of the fit
  double train_loss = 0.0;       // mean loss over the last logging window
  double seconds = 0.0;          // wall time of the fit
  double samples_per_second = 0.0;  // of all ranks together
  /// How long steps waited for checkpoints' staged snapshots to finish copying the weights (an
  /// async save's stall beyond staging; 0 when each copy ends within the next forward/backward).
  double staged_copy_wait_seconds = 0.0;
};

/// What data parallelism hands the Trainer (add_data_parallel does it for DataParallelPolicy).
struct Replication {
  /// This process's ranks: the Trainer reads this rank's share of the data, averages logged and
  /// validation figures across ranks, writes logs and metrics on rank 0 only, and takes every
  /// stop decision on all ranks alike.
  std::shared_ptr<Communicator> communicator;
  /// The sharded optimizer state, or null: attached to the optimizer now (before any state
  /// exists); snapshots and restores go through it.
  std::shared_ptr<OptimizerShards> optimizer_shards;
  /// Gradient storage held besides the parameters' .grad (buckets), for memory reports.
  std::function<std::vector<torch::Tensor>()> held_gradients;
};

class Trainer : public TrainingRun {
 public:
  Trainer(Model model, OptimizerFactory make_optimizer, std::shared_ptr<const Dataset> train_data,
          TrainerOptions options = {}, DataLoaderOptions data_options = {});
  ~Trainer() override;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void set_validation_data(std::shared_ptr<const Dataset> data);
  void set_lr_schedule(LrSchedule schedule);
  /// Placed by its phase (Policy::phase): every hook calls the policies in phase order, and in
  /// the order added within a phase. Names must be unique.
  void add_policy(std::shared_ptr<Policy> policy);
  /// Where fit() continues from (checkpoints); at most one, before the fit.
  void set_resume_source(std::shared_ptr<ResumeSource> source);
  /// Trains as one of several replicas (see Replication); at most once, before the fit.
  void replicate(Replication replication);

  /// Changes the training micro-batch size; only before the fit starts (automatic batch size).
  void set_batch_size(int64_t batch_size);
  double progress() const override;
  double samples_per_s() const override;

  /// Trains until max_epochs, max_steps or a policy's stop; returns the final counters.
  FitResult fit();
  /// Runs the validation set once and returns its metrics (weighted mean over batches).
  Metrics validate();

  TrainingSnapshot snapshot() const override;
  std::shared_ptr<StagedSnapshot> staged_snapshot() const override;
  /// Continues from `snapshot`: weights, optimizer, counters, data position, policies, RNG.
  /// Throws TrainingError naming what does not fit (a parameter's shape, the world size).
  void restore(const TrainingSnapshot& snapshot);

  // The run as policies see it (see TrainingRun).
  const TrainerState& state() const override { return state_; }
  const TrainerOptions& options() const override { return options_; }
  const DataLoaderOptions& data_options() const override { return train_loader_.options(); }
  const Model& model() const override { return model_; }
  const OptimizerFactory& optimizer_factory() const override { return make_optimizer_; }
  const Dataset& train_data() const override { return train_loader_.dataset(); }
  const Dataset* validation_data() const override { return validation_loader_ ? &validation_loader_->dataset() : nullptr; }
  torch::Device device() const override { return device_; }
  int64_t rank() const override { return communicator_->rank(); }
  int64_t world_size() const override { return communicator_->world_size(); }
  bool any_rank(bool local) const override;
  torch::Tensor reduce_across_ranks(const torch::Tensor& values, ReduceOp op) const override;
  std::shared_ptr<const ShardingInfo> optimizer_sharding() const override;
  int64_t gradient_bytes() const override;
  int64_t batches_per_epoch() const override { return train_loader_.batches_per_epoch(); }
  DataPosition data_position() const override { return train_loader_.position(); }
  void record(const std::string& event, const std::vector<std::pair<std::string, double>>& fields) const override;
  void check_finite(const std::string& at, bool weights) const override;
  std::string last_checkpoint_text() const override;

  /// The optimizer the factory built; with a sharded optimizer (Replication::optimizer_shards)
  /// it updates this rank's pieces of the parameters.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  /// The ranks it trains with (Replication::communicator; one process without): for the program
  /// around the fit, such as choosing a batch size every rank agrees on. Policies see only
  /// TrainingRun's agreements.
  Communicator& communicator() const { return *communicator_; }
  const std::vector<std::shared_ptr<Policy>>& policies() const { return policies_; }

 private:
  void train_epoch();
  /// The step sequence: forward, loss, backward and, on a boundary, reduction, unscaling,
  /// clipping, the optimizer step and the LR schedule (trainer.cpp).
  void train_micro_step(const Batch& batch, bool last_in_epoch, bool first_in_epoch);
  /// Steps 2-4: forward and loss under the policies' scopes, the loss transforms, backward (with
  /// the out-of-memory safety net around them), then the step's summed loss.
  void forward_backward(StepContext& ctx, const Batch& batch);
  void forward_loss_backward(StepContext& ctx, const Batch& batch, bool& transformed);
  /// Step 9: the optimizer step unless cancelled, the standing decisions, the LR schedule.
  void optimizer_step(const StepContext& ctx);
  /// Step 10 before the policies: counters, the loss window, the log line, validation, max_steps.
  void bookkeeping(const StepContext& ctx, int64_t samples);
  void apply_lr_schedule();
  void maybe_stop();
  bool stopping() const { return state_.stop_reason.has_value(); }

  // Going back (trainer_rewind.cpp).
  /// Before the first step: the resume source's newest snapshot that restores on every rank.
  void resume();
  /// After step 5: whether some rank could not finish this window; if so it is dropped on every
  /// rank and run again with half the micro-batch.
  bool window_dropped();
  /// Back to a snapshot a policy asked for, reading on from where it said.
  void roll_back(const StepContext::Rollback& rollback);
  /// The micro-batch from now on; the next step's context says it changed.
  void change_micro_batch(int64_t new_size);
  /// The model's weights and the optimizer's state from a snapshot, sharded or not (trainer_snapshot.cpp).
  void restore_weights_and_optimizer(const TrainingSnapshot& snapshot);

  // What the run reports (trainer_report.cpp).
  /// The log line and metrics record of the window since the last one.
  void log_training();
  /// "epoch E, batch B of N (dataset examples ...), targets lo..hi": where an error happened.
  std::string describe_batch(const Batch& batch) const;
  /// Sums `values` across ranks (one collective); a no-op alone.
  std::vector<double> sum_across_ranks(std::vector<double> values) const;

  Model model_;
  OptimizerFactory make_optimizer_;
  TrainerOptions options_;
  DataLoader train_loader_;
  std::unique_ptr<DataLoader> validation_loader_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<double> base_lrs_;
  LrSchedule lr_schedule_;
  std::vector<std::shared_ptr<Policy>> policies_;
  std::shared_ptr<ResumeSource> resume_source_;
  std::shared_ptr<Communicator> communicator_;
  std::shared_ptr<OptimizerShards> shards_;
  std::function<std::vector<torch::Tensor>()> held_gradients_;
  torch::Device device_;
  TrainerState state_;
  mutable MetricsLog metrics_log_;  // output only: recording an event does not change training
  int64_t validated_at_step_ = -1;  // so an epoch end does not repeat a validation just run

  std::unique_ptr<detail::LossWindow> loss_window_;  // each step's summed loss and the log window
  std::unique_ptr<detail::OomSafetyNet> oom_net_;  // armed by StepContext::retry_window_on_out_of_memory
  std::unique_ptr<detail::NonFiniteWatch> nonfinite_;  // options_.stop_on_nonfinite_loss
  std::unique_ptr<detail::StepLine> step_line_;  // the log line, figures said when they change
  // Staged snapshots still reading the weights: waited for before the weights or the optimizer's
  // state change (the next step's gradient reduction, a restore, leaving fit).
  std::shared_ptr<SnapshotCopyFence> copy_fence_ = std::make_shared<SnapshotCopyFence>();
  StepContext::Standing standing_;  // policies' standing decisions (learning-rate factor, precision)
  double applied_lr_factor_ = 1.0;  // standing_.lr_factor as last applied
  std::optional<StepContext::MicroBatchChange> micro_batch_change_;  // told to the next step
  DataPosition batch_position_;  // where the batch in training was read from (error messages, the OOM net)
};

/// Resolves "auto", "cpu", "cuda", "cuda:N"; throws OptionError naming the value.
torch::Device resolve_device(const std::string& name);

}  // namespace frugal
