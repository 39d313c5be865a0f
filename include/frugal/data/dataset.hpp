#pragma once
// Where training data comes from. A Dataset knows how many examples it has and turns a list of
// indices into a Batch; batching, shuffling and the saved position live in DataLoader, so a
// dataset stays a small, stateless thing. ShardedDataset (sharded_dataset.hpp) streams from tar
// shards behind the same interface; DataLoader's worker threads call fetch() concurrently.
//
//   auto data = std::make_shared<frugal::TensorDataset>(inputs, targets);
//   frugal::DataLoader loader(data, frugal::DataLoaderOptions().batch_size(64));

#include <torch/types.h>

#include <memory>
#include <vector>

#include "frugal/data/batch.hpp"

namespace frugal {
namespace detail {
class BatchBuffers;
}

/// What a loader knows when it asks for a batch: datasets with per-epoch choices (an augmented
/// variant, a random transform seeded per sample) use it to stay deterministic.
struct FetchContext {
  int64_t epoch = 0;
  int64_t seed = 0;
  /// A loader's reused batch buffers, for datasets that collate decoded samples (null: fresh
  /// tensors); `pinned`: the loader wants page-locked batches.
  std::shared_ptr<detail::BatchBuffers> buffers;
  bool pinned = false;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// The examples at `indices` (each in [0, size())), stacked into one batch.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
  /// The batch as a loader sees it in `context.epoch`; by default get_batch(). DataLoader's
  /// worker threads call this concurrently, so it must be thread-safe.
  virtual Batch fetch(const std::vector<int64_t>& indices, const FetchContext& context) const;
  /// The order of all examples in a shuffled epoch, fixed by (seed, epoch). By default a
  /// uniform permutation; sharded data overrides it to keep reads near-sequential.
  virtual std::vector<int64_t> shuffled_order(int64_t seed, int64_t epoch) const;
};

/// Examples held as two tensors whose first dimension indexes the example.
class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor inputs, torch::Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  torch::Tensor inputs_;
  torch::Tensor targets_;
};

}  // namespace frugal
