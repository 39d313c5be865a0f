#pragma once
// Batches over a Dataset in an order fixed by (seed, epoch), with a position that can be saved
// and restored, so a resumed run sees exactly the batches it would have seen.
// With num_replicas > 1 each replica (rank) reads a disjoint, equally sized share of every
// epoch, as torch.utils.data.DistributedSampler does.
//
//   frugal::DataLoader loader(dataset, frugal::DataLoaderOptions().batch_size(32).seed(7));
//   loader.start_epoch(0);
//   while (auto batch = loader.next()) train_on(*batch);
//   DataPosition where = loader.position();   // goes into the checkpoint

#include <torch/arg.h>

#include <memory>
#include <optional>
#include <vector>

#include "frugal/data/dataset.hpp"

namespace frugal {

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

 public:  // TORCH_ARG leaves the struct in private:
  /// Throws OptionError naming the bad field and value.
  void validate() const;
};

/// Where a loader stands: enough to continue exactly after a restart.
struct DataPosition {
  int64_t epoch = 0;
  int64_t batch_index = 0;  // batches already handed out in this epoch
  int64_t seed = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);

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

  DataPosition position() const { return {epoch_, batch_index_, options_.seed()}; }
  /// Continues from `position`; throws OptionError if it does not fit this loader.
  void restore(const DataPosition& position);
  /// Reads replica `rank`'s share of num_replicas from now on (rewinds the current epoch).
  void shard(int64_t num_replicas, int64_t rank);

  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::vector<int64_t> order_;  // this replica's example indices for the current epoch
  int64_t epoch_ = 0;
  int64_t batch_index_ = 0;
};

}  // namespace frugal
