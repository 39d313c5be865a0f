#include "frugal/config/standard_options.hpp"

#include <c10/util/StringUtil.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "frugal/core/run_lock.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/data/sharded_dataset.hpp"
#include "frugal/distributed/agreement.hpp"
#include "frugal/policies/cpu_threads.hpp"

namespace frugal {

namespace fs = std::filesystem;

void bind(Config& config, StandardOptions& o) {
  TrainerOptions& t = o.trainer;
  config.bind("trainer.max_epochs", t.max_epochs(), "Epochs to train");
  config.bind("trainer.max_steps", t.max_steps(), "Stop after this many optimizer steps; -1 = no limit");
  config.bind("trainer.pause_at_step", t.pause_at_step(),
              "End this run after this many steps without changing the schedule (a pause the next run resumes); -1 = off");
  config.bind("trainer.pause_at_epoch", t.pause_at_epoch(),
              "End this run after this many epochs without changing the schedule (a pause the next run resumes); -1 = off");
  config.bind("trainer.validate_every_n_steps", t.validate_every_n_steps(), "Validate every N steps; 0 = off");
  config.bind("trainer.validate_every_epoch", t.validate_every_epoch(), "Validate at the end of each epoch");
  config.bind("trainer.validation_batch_size", t.validation_batch_size(), "Validation batch size; 0 = data.batch_size");
  config.bind("trainer.log_every_n_steps", t.log_every_n_steps(), "Write a metrics line every N steps");
  config.bind("trainer.device", t.device(), "auto, cpu, cuda or cuda:N");
  config.bind("trainer.run_dir", t.run_dir(), "Directory for config.toml, metrics.jsonl, train.log; \"\" = none");
  config.bind("trainer.tensorboard", t.tensorboard(), "Also write metrics as TensorBoard scalars in <run_dir>/tensorboard");
  config.bind("trainer.cpu_memory_cache", t.cpu_memory_cache(),
              "Keep freed CPU tensor blocks for reuse during fit (no page faults for each step's tensors)");
  config.bind("trainer.stop_on_nonfinite_loss", t.stop_on_nonfinite_loss(),
              "Stop with an error on a NaN/inf training loss; never checkpoint non-finite weights");
  config.bind("trainer.halve_batch_on_oom", o.accumulation.halve_batch_on_oom(),  // the accumulation policy's switch
              "Out of memory in a step: halve the micro-batch, double accumulation, go on");
  config.bind("trainer.cpu_threads", o.cpu_threads,  // CpuThreadsPolicy's
              "Intra-op threads of the training thread during the fit; 0 = automatic (on CUDA: the cores the loader workers leave)");
  config.add_check("trainer", [&t] { t.validate(); });
  config.add_check("trainer", [&o] { CpuThreadsPolicy::check(o.cpu_threads); });

  DataLoaderOptions& d = o.data;
  config.bind("data.batch_size", d.batch_size(), "Examples per (micro-)batch");
  config.bind("data.shuffle", d.shuffle(), "Shuffle each epoch (by seed and epoch)");
  config.bind("data.drop_last", d.drop_last(), "Drop the last, smaller batch of an epoch");
  config.bind("data.seed", d.seed(), "Seed of the data order");
  config.bind("data.num_workers", d.num_workers(), "Threads that read, decode and collate batches ahead; 0 = none");
  config.bind("data.prefetch_batches", d.prefetch_batches(), "Batches made ahead of training (with workers)");
  config.bind("data.worker_threads", d.worker_threads(),
              "Intra-op threads of each loader worker's tensor work; 0 = the process's (oversubscribes the cores)");
  config.add_check("data", [&d] { d.validate(); });
  ShardedDatasetOptions& sh = o.shards;
  config.bind("data.shuffle_buffer", sh.shuffle_buffer(), "Shards: samples in the shuffle buffer (shards are permuted too)");
  config.bind_enum("data.on_corrupt", sh.on_corrupt(),
                   "Shards: a corrupt sample or shard stops with its file and offset, or is counted and skipped");
  config.bind("data.augmented_variants", sh.variants(),
              "Shards: offline-augmented variants per sample (frugal-data augment); 0 = none");
  config.add_check("data", [&sh] { sh.validate(); });

  SmokeTestOptions& s = o.smoke_test;
  config.bind_enum("smoke_test.mode", s.mode(),
                   "CPU smoke test before the run; auto = fail-mode when training on a GPU");
  config.bind("smoke_test.batches", s.batches(), "Batches the smoke test runs");
  config.add_check("smoke_test", [&s] { s.validate(); });

  MixedPrecisionOptions& p = o.precision;
  config.bind_enum("precision.mode", p.mode(),
                   "fp16 = autocast + dynamic loss scaling; bf16 = autocast");
  config.bind("precision.autocast", p.autocast(), "Run the forward pass under autocast");
  GradScalerOptions& g = p.scaler();
  config.bind("precision.init_scale", g.init_scale(), "Initial fp16 loss scale");
  config.bind("precision.growth_factor", g.growth_factor(), "Scale growth after growth_interval clean steps");
  config.bind("precision.backoff_factor", g.backoff_factor(), "Scale backoff after an overflow");
  config.bind("precision.growth_interval", g.growth_interval(), "Clean steps before the scale grows");
  config.bind("precision.min_scale", p.min_scale(), "Floor of the fp16 loss scale");
  config.bind_enum("precision.on_min_scale", p.on_min_scale(),
                   "At the floor: stop, or fall back to bf16 (else fp32)");
  config.add_check("precision", [&p] { p.validate(); });
  config.add_environment_alias("FRUGAL_PRECISION", "precision.mode");

  GradientAccumulationOptions& a = o.accumulation;
  config.bind("accumulation.steps", a.steps(), "Micro-batches per optimizer step");
  config.bind("accumulation.effective_batch_size", a.effective_batch_size(),
              "If > 0, derive steps = this / (batch_size x replicas)");
  config.add_check("accumulation", [&a] { a.validate(); });
  config.add_environment_alias("FRUGAL_ACCUMULATE_STEPS", "accumulation.steps");
  config.add_environment_alias("FRUGAL_EFFECTIVE_BATCH_SIZE", "accumulation.effective_batch_size");

  GradientClippingOptions& c = o.clipping;
  config.bind_enum("clipping.mode", c.mode(), "Clip gradients by global norm or by value");
  config.bind("clipping.max_norm", c.max_norm(), "Largest total gradient norm");
  config.bind("clipping.norm_type", c.norm_type(), "p of the p-norm (inf: max norm)");
  config.bind("clipping.max_value", c.max_value(), "Largest absolute gradient value");
  config.add_check("clipping", [&c] { c.validate(); });
  config.add_environment_alias("FRUGAL_CLIP_NORM", "clipping.max_norm");

  StateQuantization& states = o.optimizer_states;
  config.bind("optimizer.state_bits", states.bits(),
              "Optimizer states in 32 or 8 bits (block-wise quantized, as bitsandbytes' 8-bit optimizers; Frugal's optimizers only)");
  config.bind("optimizer.state_min_elements", states.min_elements(), "Parameters with fewer elements keep 32-bit states");
  config.add_check("optimizer", [&states] { states.validate(); });

  config.bind("checkpoint.enabled", o.checkpoint_enabled, "Write checkpoints and resume from them");
  CheckpointOptions& k = o.checkpoint;
  config.bind("checkpoint.dir", k.dir(), "Checkpoint directory; \"\" = <run_dir>/checkpoints");
  config.bind("checkpoint.every_n_steps", k.every_n_steps(), "Save every N optimizer steps; 0 = off");
  config.bind("checkpoint.every_n_minutes", k.every_n_minutes(), "Save every T minutes; 0 = off");
  config.bind("checkpoint.every_epoch", k.every_epoch(), "Save at each epoch end");
  config.bind("checkpoint.at_end", k.at_end(), "Save when the fit ends");
  config.bind("checkpoint.keep_last", k.keep_last(), "Keep the newest N; 0 = all");
  config.bind("checkpoint.keep_best", k.keep_best(), "Also keep the best K by checkpoint.monitor");
  config.bind("checkpoint.monitor", k.monitor(), "Validation metric that ranks checkpoints");
  config.bind_enum("checkpoint.monitor_mode", k.monitor_mode(), "Lower or higher is better");
  config.bind_enum("checkpoint.weights_dtype", k.weights_dtype(),
                   "Storage precision of the weights (fp16/bf16: half the size, resume not exact)");
  config.bind("checkpoint.archive_dir", k.archive_dir(), "Move stale checkpoints here instead of deleting them");
  config.bind("checkpoint.archive_after_days", k.archive_after_days(), "Archive checkpoints older than D days; 0 = off");
  config.bind("checkpoint.async", k.async(), "Write in a background thread");
  config.bind("checkpoint.resume", k.resume(), "Resume from the newest valid checkpoint");
  config.bind("checkpoint.on_signal", k.on_signal(), "On SIGTERM/SIGUSR1: checkpoint and exit 0");
  RemoteOptions& remote = k.remote();
  config.bind("checkpoint.remote", remote.url(),
              "s3://bucket/prefix: also commit checkpoints to object storage and resume from there (turns checkpoints on)");
  config.bind("checkpoint.remote_endpoint", remote.endpoint(),
              "S3 endpoint scheme://host[:port]; \"\" = AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS");
  config.bind("checkpoint.remote_region", remote.region(), "Signing region; \"\" = AWS_REGION, AWS_DEFAULT_REGION, us-east-1");
  config.bind_enum("checkpoint.remote_addressing", remote.addressing(), "Bucket in the path or in the host name (auto: path with an endpoint)");
  config.bind("checkpoint.remote_deadline_seconds", remote.deadline_seconds(),
              "On SIGTERM and at the end: how long to wait for the remote commit");
  config.bind("checkpoint.remote_part_mb", remote.part_mb(), "Multipart upload part size in MiB");
  config.bind("checkpoint.remote_parallel_parts", remote.parallel_parts(), "Parts uploaded at once");
  config.bind("checkpoint.remote_lease_seconds", remote.lease_seconds(), "The prefix's lease: taken over when not renewed this long");
  config.add_environment_alias("FRUGAL_CHECKPOINT_REMOTE", "checkpoint.remote");
  config.add_check("checkpoint", [&k] { k.validate(); });

  config.bind("early_stopping.enabled", o.early_stopping_enabled, "Stop when a validation metric stagnates");
  EarlyStoppingOptions& e = o.early_stopping;
  config.bind("early_stopping.monitor", e.monitor(), "Validation metric to watch");
  config.bind_enum("early_stopping.mode", e.mode(), "Lower or higher is better");
  config.bind("early_stopping.patience", e.patience(), "Evaluations without improvement before stopping");
  config.bind("early_stopping.min_delta", e.min_delta(), "Smallest change that counts as improvement");
  config.bind("early_stopping.stopping_threshold", e.stopping_threshold(), "Stop once this good; nan = off");
  config.bind("early_stopping.divergence_threshold", e.divergence_threshold(), "Stop once this bad; nan = off");
  config.bind("early_stopping.check_finite", e.check_finite(), "Stop on a nan/inf metric");
  config.bind("early_stopping.grace_evaluations", e.grace_evaluations(), "Evaluations before it may stop the run");
  config.add_check("early_stopping", [&e] { e.validate(); });

  CommunicatorOptions& comm = o.communicator;
  config.bind_enum("distributed.backend", comm.backend(), "Collectives between processes: auto (nccl on GPUs, else gloo)");
  config.bind("distributed.timeout_seconds", comm.timeout_seconds(), "How long to wait for a peer before failing");
  config.add_check("distributed", [&comm] { comm.validate(); });
  DataParallelOptions& dp = o.data_parallel;
  config.bind("distributed.bucket_cap_mb", dp.bucket_cap_mb(), "Gradient megabytes per all-reduce");
  config.bind("distributed.overlap", dp.overlap(), "All-reduce each bucket during backward");
  config.bind_enum("distributed.buffers", dp.buffers(),
                   "Buffers (BatchNorm statistics) at each step: rank 0's, the mean, or left alone");
  config.bind("distributed.log_all_ranks", dp.log_all_ranks(), "Info-level logs from every rank, not only rank 0");
  config.bind("distributed.exit_with_launcher", o.exit_with_launcher,
              "Under torchrun: SIGTERM when the launcher dies (a checkpoint if the group is whole, then exit)");
  config.bind_enum("distributed.shard", dp.shard(),
                   "Per rank, keep 1/N of the optimizer state (optimizer, ZeRO-1) and also of the reduced gradients "
                   "(gradients, ZeRO-2); off = all of both on every rank");
  config.add_check("distributed", [&dp] { dp.validate(); });

  config.bind("auto_batch.enabled", o.auto_batch_enabled, "Find the largest micro-batch that fits before training");
  BatchSizeFinderOptions& ab = o.auto_batch;
  config.bind("auto_batch.start", ab.start(), "First (and smallest acceptable) size tried");
  config.bind("auto_batch.max", ab.max(), "Largest size allowed");
  config.bind("auto_batch.multiple_of", ab.multiple_of(), "Sizes are multiples of this");
  config.bind("auto_batch.margin", ab.margin(), "Fraction of memory a step must leave free");
  config.bind("auto_batch.cpu_memory_limit_mb", ab.cpu_memory_limit_mb(), "On CPU: memory to search against; 0 = none");
  config.bind("auto_batch.cache_file", ab.cache_file(), "Earlier results; \"\" = ~/.cache/frugal/batch_sizes.json");
  config.add_check("auto_batch", [&ab] { ab.validate(); });

  config.bind("throughput.enabled", o.throughput_enabled, "Log tokens/s, MFU, peak memory, GPU utilisation");
  ThroughputOptions& tp = o.throughput;
  config.bind("throughput.peak_tflops", tp.peak_tflops(), "Dense peak TFLOP/s of one device; 0 = known GPUs by name");
  config.bind("throughput.nvml", tp.nvml(), "Read GPU utilisation through NVML when present");
  config.add_check("throughput", [&tp] { tp.validate(); });

  CostOptions& co = o.cost;
  config.bind("cost.price_per_device_hour", co.price_per_device_hour(), "Price of one device-hour; 0 = cost tracking off");
  config.bind("cost.devices", co.devices(), "Devices billed; 0 = the world size");
  config.bind("cost.budget", co.budget(), "Budget the alerts refer to; 0 = no alerts");
  config.bind("cost.alert_fractions", co.alert_fractions(), "Fractions of the budget that raise an alert");
  config.bind("cost.hard_budget", co.hard_budget(), "Stop with a checkpoint once the cost reaches this; 0 = never");
  config.bind("cost.currency", co.currency(), "Currency shown in logs");
  config.add_check("cost", [&co] { co.validate(); });

  ProfilerOptions& pr = o.profiler;
  config.bind("profiler.every_n_steps", pr.every_n_steps(), "Profile a few steps every N optimizer steps; 0 = off");
  config.bind("profiler.every_n_minutes", pr.every_n_minutes(), "... or every T minutes; 0 = off");
  config.bind("profiler.every_epoch", pr.every_epoch(), "... or at the start of each epoch");
  config.bind("profiler.skip_steps", pr.skip_steps(), "Micro-steps at an epoch's start never profiled");
  config.bind("profiler.steps", pr.steps(), "Micro-steps recorded per capture");
  config.bind("profiler.top", pr.top(), "Operators listed in the summary");
  config.bind("profiler.record_shapes", pr.record_shapes(), "Record input shapes in traces");
  config.bind("profiler.all_ranks", pr.all_ranks(), "Profile every rank, not only rank 0");
  config.bind("profiler.dir", pr.dir(), "Trace directory; \"\" = <run_dir>/profiles");
  config.add_check("profiler", [&pr] { pr.validate(); });

  config.bind("recovery.enabled", o.recovery_enabled, "Loss-spike and NaN recovery ladder: skip, roll back, lower LR, switch precision, stop");
  RecoveryOptions& r = o.recovery;
  config.bind("recovery.window", r.window(), "Clean steps in the running median of the loss");
  config.bind("recovery.min_history", r.min_history(), "Steps of history before spikes are judged");
  config.bind("recovery.spike_factor", r.spike_factor(), "A loss above this x the running median is a spike; 0 = off");
  config.bind("recovery.max_grad_norm", r.max_grad_norm(), "A gradient norm above this is an anomaly; 0 = off");
  config.bind("recovery.check_gradients", r.check_gradients(), "Compute the gradient norm every step (one pass) when clipping does not give it");
  config.bind("recovery.repeat_window", r.repeat_window(), "An anomaly within this many steps of the last climbs a rung");
  config.bind("recovery.snapshot_every_n_steps", r.snapshot_every_n_steps(), "In-memory snapshot of a good step every N steps");
  config.bind("recovery.snapshots", r.snapshots(), "Snapshots kept; a rollback returns to the oldest");
  config.bind("recovery.skip_batches", r.skip_batches(), "Batches skipped after the anomaly on a rollback, besides those since the snapshot");
  config.bind("recovery.lr_factor", r.lr_factor(), "Rung 3: learning-rate multiplier");
  config.bind("recovery.lr_window", r.lr_window(), "Rung 3: steps the lower learning rate holds");
  config.bind("recovery.switch_precision", r.switch_precision(), "Rung 4: switch fp16 -> bf16 -> fp32");
  config.bind("recovery.max_rollbacks", r.max_rollbacks(), "Rollbacks allowed in a run; then the ladder stops it");
  config.add_check("recovery", [&r] { r.validate(); });

  config.bind("progress.enabled", o.progress_enabled, "Progress bar on a terminal, periodic progress lines otherwise");
  ProgressOptions& pg = o.progress;
  config.bind("progress.refresh_seconds", pg.refresh_seconds(), "Terminal: seconds between redraws");
  config.bind("progress.log_every_seconds", pg.log_every_seconds(), "Not a terminal: seconds between progress lines; 0 = none");
  config.add_check("progress", [&pg] { pg.validate(); });

  config.bind_enum("log.level", o.log_level,
                   "Console and train.log verbosity");
}

namespace {

std::string default_batch_size_cache() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::filesystem::path base = xdg && *xdg ? std::filesystem::path(xdg) : home && *home ? std::filesystem::path(home) / ".cache"
                                                                                              : std::filesystem::path(".cache");
  return (base / "frugal" / "batch_sizes.json").string();
}

// Runs the batch-size search and writes the answer back into the options, keeping the
// effective batch when accumulation fixes one.
void apply_auto_batch_size(Trainer& trainer, StandardOptions& options, const ProbeBatch& probe) {
  BatchSizeFinderOptions finder = options.auto_batch;
  if (finder.cache_file().empty()) finder.cache_file(default_batch_size_cache());
  const BatchSizeSearch search = choose_batch_size(trainer, probe, options.precision, finder);  // sets the Trainer's
  int64_t batch_size = search.batch_size;
  GradientAccumulationOptions& acc = options.accumulation;
  if (acc.effective_batch_size() == 0 && acc.steps() > 1) {
    const int64_t effective = options.data.batch_size() * acc.steps();  // per rank
    const auto [micro, steps] = keep_effective_batch(effective, batch_size);
    batch_size = micro;
    acc.steps(steps);
    log::info(c10::str("automatic batch size: micro-batch ", micro, " x ", steps, " accumulation steps keeps the effective batch of ",
                       effective, " per rank"));
  } else if (acc.effective_batch_size() > 0) {
    // The accumulation policy derives its steps from the micro-batch, which must divide the effective batch.
    batch_size = keep_effective_batch(acc.effective_batch_size() / trainer.world_size(), batch_size).first;
  }
  if (batch_size != search.batch_size) trainer.set_batch_size(batch_size);
  options.data.batch_size(batch_size);
}

}  // namespace

namespace {

// What every rank must have the same of: the resolved options, and the data (its size; for shards
// their names, sizes and sample counts, which do not depend on where each node mounts them).
std::map<std::string, std::string> values_to_agree_on(const Trainer& trainer, const std::string& resolved_config) {
  std::map<std::string, std::string> values = resolved_config.empty() ? std::map<std::string, std::string>() : flatten_toml(resolved_config);
  auto describe = [&](const std::string& name, const Dataset* data) {
    if (data == nullptr) return;
    values["data identity: " + name + " examples"] = std::to_string(data->size());
    if (const auto* sharded = dynamic_cast<const ShardedDataset*>(data)) {
      std::string shards;
      for (const auto& s : sharded->shards()) shards += c10::str(s.shard.filename().string(), ":", s.shard_bytes, ":", s.size(), " ");
      values["data identity: " + name + " shards"] = shards;
    }
  };
  describe("training", &trainer.train_data());
  describe("validation", trainer.validation_data());
  return values;
}

}  // namespace

void add_policies(Trainer& trainer, StandardOptions& options, const std::string& resolved_config, const ProbeBatch& probe) {
  // 8-bit states asked of an optimizer that cannot keep them would be a silent no-op.
  if (options.optimizer_states.bits() != 32 && quantized_states_of(trainer.optimizer()) == nullptr) {
    throw OptionError("optimizer.state_bits", c10::str("optimizer.state_bits=", options.optimizer_states.bits(),
                                                       ", but this program's optimizer is not one of Frugal's (FusedAdamW, FusedAdam, "
                                                       "QuantizedSGD), which alone keep quantized states"));
  }
  // The smoke test runs in on_fit_begin, before any other policy's state matters.
  if (options.smoke_test.mode() != SmokeTestMode::off) {
    trainer.add_policy(std::make_shared<SmokeTestPolicy>(options.smoke_test));
  }
  // After the smoke test, which keeps every core; only where it changes something (set, or a GPU
  // run with loader workers).
  if (options.cpu_threads > 0 || (trainer.device().is_cuda() && trainer.data_options().num_workers() > 0)) {
    trainer.add_policy(std::make_shared<CpuThreadsPolicy>(options.cpu_threads));
  }
  // After the smoke test: a rank whose smoke test fails exits before the first collective, and
  // the others then fail promptly instead of training without it.
  const World world = detect_world(process_environment());
  if (world.world_size > 1) {
    const std::shared_ptr<Communicator> communicator = connect(world, options.communicator);
    check_ranks_agree(*communicator, values_to_agree_on(trainer, resolved_config));
    // Agreed: now rank 0 takes the run directory and records the configuration (start_program
    // does this at once for a single process).
    if (world.rank == 0 && !options.trainer.run_dir().empty()) {
      const fs::path run_dir(options.trainer.run_dir());
      lock_run_directory(run_dir);
      if (!resolved_config.empty()) write_text_file_atomically(run_dir / "config.toml", resolved_config);
    }
    add_data_parallel(trainer, std::make_shared<DataParallelPolicy>(communicator, options.data_parallel));
  } else if (options.data_parallel.shard() != ShardMode::off) {
    log::info("distributed.shard=" + to_string(options.data_parallel.shard()) + " applies to several processes; this one runs alone");
  }
  if (options.auto_batch_enabled) apply_auto_batch_size(trainer, options, probe);
  if (options.accumulation.steps() > 1 || options.accumulation.effective_batch_size() > 0 ||
      options.accumulation.halve_batch_on_oom()) {  // the safety net doubles the steps when it halves the batch
    trainer.add_policy(std::make_shared<GradientAccumulationPolicy>(options.accumulation));
  }
  if (options.precision.mode() != Precision::fp32) {
    trainer.add_policy(std::make_shared<MixedPrecisionPolicy>(options.precision));
  }
  if (options.clipping.mode() != ClipMode::off) {
    trainer.add_policy(std::make_shared<GradientClippingPolicy>(options.clipping));
  }
  if (options.throughput_enabled) {
    ThroughputOptions throughput = options.throughput;
    throughput.half_precision(options.precision.mode() != Precision::fp32);
    trainer.add_policy(std::make_shared<ThroughputPolicy>(throughput));
  }
  if (options.throughput_enabled) trainer.add_policy(std::make_shared<MemoryReportPolicy>());
  if (options.cost.price_per_device_hour() > 0) trainer.add_policy(std::make_shared<CostPolicy>(options.cost));
  if (options.profiler.enabled()) trainer.add_policy(std::make_shared<ProfilerPolicy>(options.profiler));
  if (options.progress_enabled) trainer.add_policy(std::make_shared<ProgressPolicy>(options.progress));
  if (options.early_stopping_enabled) trainer.add_policy(std::make_shared<EarlyStoppingPolicy>(options.early_stopping));
  if (options.checkpoint_enabled || options.checkpoint.remote().enabled()) {
    add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(options.checkpoint, resolved_config));
  } else if (options.cost.hard_budget() > 0) {
    // A budget stop must be resumable: only the final checkpoint, in the default place.
    log::info("cost.hard_budget is set: a checkpoint is written when the run stops (checkpoint.enabled is off)");
    CheckpointOptions at_stop = options.checkpoint;
    at_stop.every_n_steps(0).every_n_minutes(0).every_epoch(false).at_end(true);
    add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(at_stop, resolved_config));
  }
  if (options.recovery_enabled) trainer.add_policy(std::make_shared<RecoveryPolicy>(options.recovery));
}

int64_t optimizer_steps_per_epoch(const Trainer& trainer, const StandardOptions& options) {
  const auto& acc = options.accumulation;
  const int64_t accumulate = acc.effective_batch_size() > 0
                                 ? accumulation_steps_for(acc.effective_batch_size(), options.data.batch_size(), trainer.world_size())
                                 : acc.steps();
  return (trainer.batches_per_epoch() + accumulate - 1) / accumulate;  // a partial window at an epoch's end still steps
}

}  // namespace frugal
