#pragma once
// The Trainer runs the training loop over any LibTorch module. Its step sequence lives in one
// function, train_micro_step(), written as numbered steps; every efficiency feature is a
// Policy hooked into that sequence (see policy.hpp for the hook order).
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
#include "frugal/core/trainer_options.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/data/data_loader.hpp"

namespace frugal {

namespace detail {
class NonFiniteWatch;
class OomSafetyNet;
class StepLine;
}

/// Builds the optimizer over a module that already sits on the training device. A factory
/// (not an optimizer) so that copies of the model (smoke test) get optimizers of their own.
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(torch::nn::Module&)>;

struct FitResult {
  TrainerState state;            // counters at the end of the fit
  double train_loss = 0.0;       // mean loss over the last logging window
  double seconds = 0.0;          // wall time of the fit
  double samples_per_second = 0.0;  // of all ranks together
};

class Trainer {
 public:
  Trainer(Model model, OptimizerFactory make_optimizer, std::shared_ptr<const Dataset> train_data,
          TrainerOptions options = {}, DataLoaderOptions data_options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void set_validation_data(std::shared_ptr<const Dataset> data);
  void set_lr_schedule(LrSchedule schedule);
  /// Policies run in the order added within each hook point. Names must be unique. A policy with
  /// a communicator (data parallelism) makes this process read its rank's share of the data.
  void add_policy(std::shared_ptr<Policy> policy);

  /// Changes the training micro-batch size; only before the fit starts (automatic batch size).
  void set_batch_size(int64_t batch_size);
  /// Fraction of the whole run done (0..1), by micro-steps of max_epochs and by max_steps.
  double progress() const;
  /// Samples per second of the whole job (all ranks) over the latest log window; set before the
  /// policies' collect_metrics, so their figures share its window.
  double samples_per_s() const { return last_window_samples_per_s_; }

  /// Trains until max_epochs, max_steps or a policy's stop; returns the final counters.
  FitResult fit();
  /// Runs the validation set once and returns its metrics (weighted mean over batches).
  Metrics validate();

  /// A host-memory copy of everything needed to continue exactly (see TrainingSnapshot).
  TrainingSnapshot snapshot() const;
  /// Continues from `snapshot`: weights, optimizer, counters, data position, policies, RNG.
  /// Throws TrainingError naming what does not fit (a parameter's shape, the world size).
  void restore(const TrainingSnapshot& snapshot);

  const TrainerState& state() const { return state_; }
  const TrainerOptions& options() const { return options_; }
  const DataLoaderOptions& data_options() const { return train_loader_.options(); }
  const Model& model() const { return model_; }
  const OptimizerFactory& optimizer_factory() const { return make_optimizer_; }
  const Dataset& train_data() const { return train_loader_.dataset(); }
  /// The validation data, or null when there is none.
  const Dataset* validation_data() const { return validation_loader_ ? &validation_loader_->dataset() : nullptr; }
  torch::Device device() const { return device_; }
  /// The optimizer the factory built; with a sharded optimizer (a policy's optimizer_shards) it
  /// updates this rank's pieces of the parameters.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  /// The shards of a sharded optimizer, or nullptr.
  const std::shared_ptr<OptimizerShards>& optimizer_shards() const { return shards_; }
  const std::vector<std::shared_ptr<Policy>>& policies() const { return policies_; }
  /// Optimizer-step boundaries per epoch without accumulation: batches of this rank's share.
  int64_t batches_per_epoch() const { return train_loader_.batches_per_epoch(); }
  /// Where the training data is read next (this rank's batches).
  DataPosition data_position() const { return train_loader_.position(); }

  /// Writes a metrics record (metrics.jsonl and TensorBoard) on rank 0; a no-op elsewhere and
  /// without a run directory. For policies' events: budget alerts, profiles, epoch costs.
  void record(const std::string& event, const std::vector<std::pair<std::string, double>>& fields) const;

  /// Throws NonFiniteError, on every rank, when any rank has seen a non-finite training loss (see
  /// TrainerOptions::stop_on_nonfinite_loss) or, with `weights`, holds a non-finite weight; a
  /// no-op with that option off. A collective: every rank calls it at the same point. `at` says
  /// where the run stops ("the checkpoint of step 40, not written").
  void check_finite(const std::string& at, bool weights) const;

  /// "the last good checkpoint is <dir>" or that there is none, for errors that end a run.
  std::string last_checkpoint_text() const;

  /// The replicas this process trains with (a single-process no-op unless a policy brought one).
  Communicator& communicator() const { return *communicator_; }
  int64_t rank() const;
  int64_t world_size() const;

 private:
  void train_epoch();
  /// The step sequence: forward, loss, backward and, on a boundary, reduction, unscaling,
  /// clipping, the optimizer step and the LR schedule.
  void train_micro_step(const Batch& batch, bool last_in_epoch);
  /// "epoch E, batch B of N (dataset examples ...), targets lo..hi": where an error happened.
  std::string describe_batch(const Batch& batch) const;
  /// Steps 2-4 of the sequence: forward and loss under the policies' scopes, the loss
  /// transforms (`transformed` once they all ran), backward.
  void forward_backward(StepContext& ctx, const Batch& batch, bool& transformed);
  /// The model's weights and the optimizer's state from a snapshot, sharded or not.
  void restore_weights_and_optimizer(const TrainingSnapshot& snapshot);
  void apply_lr_schedule();
  /// The micro-batch from now on, and the policies told (accumulation keeps the effective batch).
  void change_micro_batch(int64_t new_size);
  /// After a window in which some rank ran out of memory: drop it, halve the micro-batch, rewind.
  void halve_after_oom();
  /// Back to a snapshot a policy asked for, reading on from where it said.
  void roll_back(const StepContext::Rollback& rollback);
  void log_training();
  void maybe_stop();
  /// Sums `values` across ranks (one collective); a no-op alone.
  std::vector<double> sum_across_ranks(std::vector<double> values) const;
  bool stopping() const { return state_.stop_reason.has_value(); }

  Model model_;
  OptimizerFactory make_optimizer_;
  TrainerOptions options_;
  DataLoader train_loader_;
  std::unique_ptr<DataLoader> validation_loader_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<double> base_lrs_;
  LrSchedule lr_schedule_;
  std::vector<std::shared_ptr<Policy>> policies_;
  std::shared_ptr<Communicator> communicator_;
  std::shared_ptr<OptimizerShards> shards_;
  torch::Device device_;
  TrainerState state_;
  mutable MetricsLog metrics_log_;  // output only: recording an event does not change training
  int64_t validated_at_step_ = -1;  // so an epoch end does not repeat a validation just run

  std::unique_ptr<detail::OomSafetyNet> oom_net_;  // options_.halve_batch_on_oom
  std::unique_ptr<detail::NonFiniteWatch> nonfinite_;  // options_.stop_on_nonfinite_loss
  std::unique_ptr<detail::StepLine> step_line_;  // the log line, figures said when they change

  // Loss summed on the device since the last log line: read back only when logging, so the
  // loop never waits for the GPU between steps.
  torch::Tensor window_loss_sum_;
  int64_t window_micro_steps_ = 0;
  // The current optimizer step's losses, added to the window at its boundary (unless discarded).
  torch::Tensor step_loss_sum_;
  int64_t step_micro_steps_ = 0;
  double lr_factor_ = 1.0;  // the policies' product, as last applied
  int64_t window_samples_ = 0;
  int64_t batch_in_epoch_ = -1;  // the loader's index of the batch in training, for error messages
  std::chrono::steady_clock::time_point window_start_;
  double window_data_wait_start_ = 0.0;  // the loader's wait_seconds() when the window began
  double window_reduce_seconds_ = 0.0;   // host time in gradient reduction (communication)
  double last_window_loss_ = 0.0;
  double last_window_samples_per_s_ = 0.0;
};

/// Resolves "auto", "cpu", "cuda", "cuda:N"; throws OptionError naming the value.
torch::Device resolve_device(const std::string& name);

}  // namespace frugal
