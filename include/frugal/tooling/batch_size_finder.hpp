#pragma once
// Finds the largest micro-batch that fits, by running real training steps (forward, backward,
// optimizer step) on worst-case inputs: sizes double until one fails, then bisection between the
// last that fitted and the first that did not. A size "fits" when its step neither runs out of
// memory (c10::OutOfMemoryError) nor peaks above (1 - margin) of the memory; the allocator is
// emptied and its peak statistics reset between trials. The answer is always a size that was
// tried and fitted, never more than `max`; with several ranks, the smallest rank's answer. On
// CUDA the memory is the device's; on CPU it is `cpu_memory_limit_mb`, measured through
// LibTorch's allocation reports. Results are cached per (model signature, device, precision,
// world size, probe shape), so a restart does not probe again.
//
//   frugal::BatchSizeSearch search = frugal::find_batch_size(
//       [&](int64_t n) { run_one_training_step(n); }, device, frugal::BatchSizeFinderOptions().max(512));

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace frugal {

class Communicator;

struct BatchSizeFinderOptions {
  /// The first size tried (and the smallest acceptable: if it fails, the search throws).
  TORCH_ARG(int64_t, start) = 1;
  /// Never return more than this.
  TORCH_ARG(int64_t, max) = 4096;
  /// Sizes are multiples of this (8 suits tensor cores); start is rounded up to one.
  TORCH_ARG(int64_t, multiple_of) = 1;
  /// Fraction of memory a passing step must leave free (fragmentation, other processes).
  TORCH_ARG(double, margin) = 0.1;
  /// On CPU: the memory to search against; 0 = no limit (every size up to max fits).
  TORCH_ARG(int64_t, cpu_memory_limit_mb) = 0;
  /// JSON file of earlier results; "" = no cache.
  TORCH_ARG(std::string, cache_file) = "";

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

struct BatchSizeTrial {
  int64_t batch_size = 0;
  bool fits = false;
  double peak_mb = 0.0;  // peak memory of the step (0 after an out-of-memory error)
  std::string why;       // "out of memory", "peak above the limit", or empty
};

struct BatchSizeSearch {
  int64_t batch_size = 0;  // the answer
  bool from_cache = false;
  double capacity_mb = 0.0;  // the memory searched against
  std::vector<BatchSizeTrial> trials;
};

/// `trial(n)` runs one full training step at micro-batch n on `device` and releases what it
/// made. `cache_key` identifies the configuration (see batch_size_cache_key); `communicator`,
/// when given, makes every rank search and take the smallest answer. Throws TrainingError when
/// even options.start does not fit.
BatchSizeSearch find_batch_size(const std::function<void(int64_t)>& trial, const torch::Device& device,
                                const BatchSizeFinderOptions& options, const std::string& cache_key = "",
                                Communicator* communicator = nullptr);

/// "<model signature>|<device name>|<precision>|world <n>|<probe>": the model signature hashes
/// every parameter's and buffer's name, shape and dtype.
std::string batch_size_cache_key(const torch::nn::Module& module, const torch::Device& device, const std::string& precision,
                                 int64_t world_size, const std::string& probe);

}  // namespace frugal
