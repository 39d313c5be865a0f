#pragma once
// Batches over a Dataset in an order fixed by (seed, epoch), with a position that can be saved
// and restored, so a resumed run sees exactly the batches it would have seen.
// With num_replicas > 1 each replica (rank) reads a disjoint, equally sized share of every
// epoch, as torch.utils.data.DistributedSampler does. With num_workers > 0, worker threads make
// the next batches (read, decode, collate, pin) while the current one trains; batches still come
// out in order, so the result is the same for any number of workers. Each worker runs its tensor
// work on worker_threads threads (1 by default), and batches are collated into reused buffers.
//
//   frugal::DataLoader loader(dataset, frugal::DataLoaderOptions().batch_size(32).seed(7));
//   loader.start_epoch(0);
//   while (auto batch = loader.next()) train_on(*batch);
//   DataPosition where = loader.position();   // goes into the checkpoint

#include <torch/arg.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "frugal/base/data_position.hpp"
#include "frugal/data/dataset.hpp"

namespace frugal {
namespace detail {
class BatchPrefetcher;
class BatchBuffers;
}

struct DataLoaderOptions {
  TORCH_ARG(int64_t, batch_size) = 32;
  TORCH_ARG(bool, shuffle) = true;
  /// Drop the last, smaller batch of an epoch.
  TORCH_ARG(bool, drop_last) = false;
  /// Seed of the per-epoch shuffle; independent of the global RNG.
  TORCH_ARG(int64_t, seed) = 0;
  TORCH_ARG(int64_t, num_replicas) = 1;
  TORCH_ARG(int64_t, rank) = 0;
  /// With replicas: pad by wrapping around so every replica gets the same number of examples
  /// (training: every replica takes the same steps). false: no example twice, shares differ by
  /// at most one (evaluation, where results are summed across replicas).
  TORCH_ARG(bool, even_shards) = true;
  /// Threads that make batches ahead of the training loop; 0 makes each batch on the caller's
  /// thread when it is asked for.
  TORCH_ARG(int64_t, num_workers) = 0;
  /// ATen intra-op threads of each worker (the decode's resize, the collate's copies); 0 = the
  /// process's setting, which lets every worker start a parallel team as wide as the machine.
  TORCH_ARG(int64_t, worker_threads) = 1;
  /// Batches made ahead of the one being used (ready or in the making), with workers.
  TORCH_ARG(int64_t, prefetch_batches) = 4;
  /// Copy batches into page-locked memory in the workers, so the copy to a GPU is asynchronous
  /// (the Trainer turns this on when it trains on CUDA).
  TORCH_ARG(bool, pin_memory) = false;

 public:  // TORCH_ARG leaves the struct in private:
  /// Throws OptionError naming the bad field and value.
  void validate() const;
};

/// Where a loader stands: enough to continue exactly after a restart.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  /// Fixes the order of `epoch` and rewinds to its first batch.
  void start_epoch(int64_t epoch);
  /// The next batch of the current epoch, or nullopt when the epoch is over.
  std::optional<Batch> next();
  bool has_next() const { return batch_index_ < batches_per_epoch(); }
  /// True when the batch that next() returns next is the epoch's last.
  bool next_is_last() const { return batch_index_ + 1 == batches_per_epoch(); }

  int64_t batches_per_epoch() const;
  /// Examples this replica sees per epoch.
  int64_t examples_per_epoch() const;

  DataPosition position() const { return {epoch_, batch_index_, options_.seed(), options_.batch_size()}; }
  /// The dataset indices of batch `batch_index` of the current epoch (for error messages).
  std::vector<int64_t> examples_of(int64_t batch_index) const;
  /// Continues from `position`; throws OptionError if it does not fit this loader.
  void restore(const DataPosition& position);
  /// Reads replica `rank`'s share of num_replicas from now on (rewinds the current epoch).
  void shard(int64_t num_replicas, int64_t rank);

  /// Batches of `batch_size` from now on (rewinds the current epoch).
  void set_batch_size(int64_t batch_size);
  /// Pins batches from now on (see DataLoaderOptions::pin_memory).
  void set_pin_memory(bool pin);
  /// With workers and a CUDA `device`: each worker also copies its batches to the device on a
  /// side stream of its own, so the next batches are on their way while the current step runs;
  /// next() orders the caller's stream after the copy (no host wait). Implies pin_memory. A
  /// CPU device turns it off.
  void copy_ahead_to(const torch::Device& device);

  /// Seconds the caller has spent inside next() waiting for batches, since construction.
  double wait_seconds() const { return wait_seconds_; }

  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  void stop_workers();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  // This replica's example indices for the current epoch; shared with the workers, replaced
  // (never modified) when the epoch changes.
  std::shared_ptr<const std::vector<int64_t>> order_;
  int64_t epoch_ = 0;
  int64_t batch_index_ = 0;
  double wait_seconds_ = 0.0;
  std::optional<torch::Device> copy_to_;
  std::shared_ptr<detail::BatchBuffers> buffers_;  // batches collated into reused memory
  std::unique_ptr<detail::BatchPrefetcher> prefetcher_;
};

}  // namespace frugal
