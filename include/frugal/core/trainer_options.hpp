#pragma once
// The Trainer's own options: how long to train, when to validate and log, where, on what, and
// the switches of its own components (TensorBoard, the CPU memory cache, the non-finite watch).
// Policies' switches live in the options of their policies, not here.

#include <torch/arg.h>

#include <cstdint>
#include <string>

namespace frugal {

struct TrainerOptions {
  TORCH_ARG(int64_t, max_epochs) = 1;
  /// Stop after this many optimizer-step boundaries; -1 = no limit.
  TORCH_ARG(int64_t, max_steps) = -1;
  /// End this fit once this many optimizer steps (or epochs) are done, without changing
  /// max_steps / max_epochs, which LR schedules follow: a pause (with its final checkpoint) that
  /// a later run resumes exactly. -1 = off. frugal-search pauses trials at their rungs with it.
  TORCH_ARG(int64_t, pause_at_step) = -1;
  TORCH_ARG(int64_t, pause_at_epoch) = -1;
  /// Validate every N optimizer-step boundaries; 0 = only at epoch ends (if validate_every_epoch).
  TORCH_ARG(int64_t, validate_every_n_steps) = 0;
  TORCH_ARG(bool, validate_every_epoch) = true;
  /// Batch size for validation; 0 = the training batch size.
  TORCH_ARG(int64_t, validation_batch_size) = 0;
  /// Write a metrics line (and a log line) every N optimizer-step boundaries.
  TORCH_ARG(int64_t, log_every_n_steps) = 50;
  /// "cpu", "cuda", "cuda:N", or "auto" (CUDA when available).
  TORCH_ARG(std::string, device) = "auto";
  /// Holds config.toml, metrics.jsonl and train.log; "" = write nothing.
  TORCH_ARG(std::string, run_dir) = "runs/default";
  /// Also write every metrics record as TensorBoard scalars under <run_dir>/tensorboard.
  TORCH_ARG(bool, tensorboard) = true;
  /// During fit(), keep freed CPU tensor blocks for reuse instead of handing them back to the
  /// system (frugal/core/cpu_memory_cache.hpp); fit() frees what the cache holds when it returns.
  TORCH_ARG(bool, cpu_memory_cache) = true;
  /// A NaN or infinite training loss (outside steps the fp16 loss scaler skipped) stops the run
  /// with NonFiniteError at the next log line, checkpoint or the fit's end, and no checkpoint is
  /// written from non-finite weights. Off: training goes on, as LibTorch alone would.
  TORCH_ARG(bool, stop_on_nonfinite_loss) = true;

 public:  // TORCH_ARG leaves the struct in private:
  /// Throws OptionError naming the bad field and value.
  void validate() const;
};

}  // namespace frugal
