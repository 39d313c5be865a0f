#pragma once
// What a policy sees of the training run: its counters, options, model, data and devices, and
// the few services every policy may use (record a metrics event, a snapshot, the finite check,
// small agreements between ranks). It hands out answers, not the Trainer's parts: no communicator,
// no sharded optimizer, no gradient buckets.
// The Trainer is one; a policy never sees the Trainer itself, nor the other policies: they learn
// about each other through the facts published on StepContext.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/base/communicator.hpp"
#include "frugal/base/data_position.hpp"
#include "frugal/base/snapshot.hpp"
#include "frugal/base/staged_snapshot.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/core/model.hpp"
#include "frugal/core/trainer_options.hpp"
#include "frugal/data/data_loader.hpp"
#include "frugal/data/dataset.hpp"

namespace frugal {

/// Builds the optimizer over a module that already sits on the training device. A factory
/// (not an optimizer) so that copies of the model (smoke test) get optimizers of their own.
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(torch::nn::Module&)>;

class TrainingRun {
 public:
  virtual ~TrainingRun() = default;

  virtual const TrainerState& state() const = 0;
  virtual const TrainerOptions& options() const = 0;
  virtual const DataLoaderOptions& data_options() const = 0;
  virtual const Model& model() const = 0;
  virtual const OptimizerFactory& optimizer_factory() const = 0;
  virtual const Dataset& train_data() const = 0;
  /// The validation data, or null when there is none.
  virtual const Dataset* validation_data() const = 0;
  virtual torch::Device device() const = 0;

  /// This process among the replicas it trains with: rank 0 of 1 without data parallelism.
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  /// The only collectives a policy runs: small agreements that every rank makes at the same point
  /// (with one process, the local values). The gradients' collectives stay the Trainer's own.
  /// True if `local` is true on any rank (host-side where the backend allows: never waits for a GPU).
  virtual bool any_rank(bool local) const = 0;
  /// A few figures on the training device, summed or maximised element-wise across ranks (a new
  /// tensor; `values` is left as it was).
  virtual torch::Tensor reduce_across_ranks(const torch::Tensor& values, ReduceOp op) const = 0;
  /// The layout of a sharded optimizer's state over the ranks (which pieces of the weights each
  /// rank updates and checkpoints), or null when every rank holds the whole state.
  virtual std::shared_ptr<const ShardingInfo> optimizer_sharding() const = 0;
  /// Bytes this rank's gradients occupy now, each storage once: the parameters' .grad, a sharded
  /// optimizer's pieces, data-parallel buckets (for memory reports).
  virtual int64_t gradient_bytes() const = 0;

  /// Optimizer-step boundaries per epoch without accumulation: batches of this rank's share.
  virtual int64_t batches_per_epoch() const = 0;
  /// Where the training data is read next (this rank's batches).
  virtual DataPosition data_position() const = 0;
  /// Fraction of the whole run done (0..1), by micro-steps of max_epochs and by max_steps.
  virtual double progress() const = 0;
  /// Samples per second of the whole job (all ranks) over the latest log window; set before the
  /// policies' collect_metrics, so their figures share its window.
  virtual double samples_per_s() const = 0;

  /// A host-memory copy of everything needed to continue exactly (see TrainingSnapshot).
  virtual TrainingSnapshot snapshot() const = 0;
  /// The same, with the weights and the optimizer's state copied later by whoever calls
  /// finish() (a checkpoint's writer thread); the run waits for that copy before it changes them
  /// (see StagedSnapshot).
  virtual std::shared_ptr<StagedSnapshot> staged_snapshot() const = 0;
  /// Writes a metrics record (metrics.jsonl and TensorBoard) on rank 0; a no-op elsewhere and
  /// without a run directory. For policies' events: budget alerts, profiles, epoch costs.
  virtual void record(const std::string& event, const std::vector<std::pair<std::string, double>>& fields) const = 0;
  /// Throws NonFiniteError, on every rank, when any rank has seen a non-finite training loss (see
  /// TrainerOptions::stop_on_nonfinite_loss) or, with `weights`, holds a non-finite weight; a
  /// no-op with that option off. A collective: every rank calls it at the same point. `at` says
  /// where the run stops ("the checkpoint of step 40, not written").
  virtual void check_finite(const std::string& at, bool weights) const = 0;
  /// "the last good checkpoint is <dir>" or that there is none, for errors that end a run.
  virtual std::string last_checkpoint_text() const = 0;
};

}  // namespace frugal
