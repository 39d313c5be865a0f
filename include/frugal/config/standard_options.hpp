#pragma once
// The option structs every Frugal program shares, bound to their config keys in one place, and
// the policies they switch on. A program binds these plus keys of its own ([model] ...).
//
//   frugal::StandardOptions opts;
//   frugal::Config config;
//   frugal::bind(config, opts);
//   frugal::load_config(argc, argv, config, "train", frugal::process_environment());
//   frugal::Trainer trainer(model, make_optimizer, data, opts.trainer, opts.data);
//   frugal::add_policies(trainer, opts);

#include "frugal/optim/state_quantization.hpp"
#include "frugal/checkpoint/checkpoint_policy.hpp"
#include "frugal/config/config.hpp"
#include "frugal/core/trainer_options.hpp"
#include "frugal/data/data_loader.hpp"
#include "frugal/data/sharded_dataset.hpp"
#include "frugal/distributed/communicator.hpp"
#include "frugal/policies/data_parallel.hpp"
#include "frugal/log.hpp"
#include "frugal/memory/memory_report.hpp"
#include "frugal/policies/early_stopping.hpp"
#include "frugal/policies/gradient_accumulation.hpp"
#include "frugal/policies/gradient_clipping.hpp"
#include "frugal/policies/mixed_precision.hpp"
#include "frugal/policies/recovery.hpp"
#include "frugal/policies/smoke_test.hpp"
#include "frugal/tooling/auto_batch_size.hpp"
#include "frugal/tooling/cost.hpp"
#include "frugal/tooling/profiler.hpp"
#include "frugal/tooling/progress.hpp"
#include "frugal/tooling/throughput.hpp"

namespace frugal {

class Trainer;

struct StandardOptions {
  TrainerOptions trainer;      // [trainer]
  int64_t cpu_threads = 0;     // [trainer] cpu_threads: CpuThreadsPolicy's pool during the fit; 0 = automatic
  DataLoaderOptions data;      // [data]
  ShardedDatasetOptions shards;  // [data] keys of programs that read tar shards
  SmokeTestOptions smoke_test; // [smoke_test]
  MixedPrecisionOptions precision;            // [precision]
  GradientAccumulationOptions accumulation;   // [accumulation]
  GradientClippingOptions clipping;           // [clipping]
  /// [optimizer] state_bits, state_min_elements: how Frugal's optimizers (FusedAdamW, FusedAdam,
  /// QuantizedSGD) keep their states; a program hands it to the one it builds.
  StateQuantization optimizer_states;
  bool checkpoint_enabled = false;            // [checkpoint] enabled
  CheckpointOptions checkpoint;               // [checkpoint]
  bool early_stopping_enabled = false;        // [early_stopping] enabled
  EarlyStoppingOptions early_stopping;        // [early_stopping]
  CommunicatorOptions communicator;           // [distributed]
  DataParallelOptions data_parallel;          // [distributed]
  bool exit_with_launcher = true;             // [distributed] a rank stops when torchrun's agent dies
  bool auto_batch_enabled = false;            // [auto_batch] enabled
  BatchSizeFinderOptions auto_batch;          // [auto_batch]
  bool throughput_enabled = true;             // [throughput] enabled
  ThroughputOptions throughput;               // [throughput]; programs set the FLOPs per sample
  CostOptions cost;                           // [cost]; on when price_per_device_hour > 0
  ProfilerOptions profiler;                   // [profiler]; on when a trigger is set
  bool recovery_enabled = false;              // [recovery] enabled
  RecoveryOptions recovery;                   // [recovery]
  bool progress_enabled = true;               // [progress] enabled
  ProgressOptions progress;                   // [progress]
  log::Level log_level = log::Level::info;  // [log] level
};

/// Binds every field of `options` to its "section.name" key, with validation checks.
void bind(Config& config, StandardOptions& options);

/// Adds the policies `options` switch on, in this order: smoke test, data parallelism (when the
/// environment says this process is one of several: torchrun or Slurm; it connects to the
/// others here), then the automatic batch size (with `probe`; it writes the chosen batch size
/// and accumulation steps back into `options`), gradient accumulation, mixed precision,
/// clipping, throughput, cost, profiler, progress, early stopping, checkpoint, recovery (the loss is
/// divided by N before it is scaled; the gradient hooks run in the Trainer's fixed order
/// whatever the policy order; the checkpoint comes after the policies that stop a run so that
/// a stop decided by early stopping or the budget is saved with its counters, and the recovery
/// ladder after it so that a run it gives up on ends with that checkpoint written; a hard
/// budget turns checkpoints on).
/// `resolved_config` (Config::to_toml()) is stored in each checkpoint.
void add_policies(Trainer& trainer, StandardOptions& options, const std::string& resolved_config = "",
                  const ProbeBatch& probe = {});

/// Optimizer steps in one epoch of this rank's share of the data, given the accumulation options
/// (for LR schedules written in steps). Call after add_policies: it needs the world size.
int64_t optimizer_steps_per_epoch(const Trainer& trainer, const StandardOptions& options);

}  // namespace frugal
