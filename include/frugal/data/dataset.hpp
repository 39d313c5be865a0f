#pragma once
// Where training data comes from. A Dataset knows how many examples it has and turns a list of
// indices into a Batch; batching, shuffling and the saved position live in DataLoader, so a
// dataset stays a small, stateless thing (a later pipeline adds shards and prefetching behind
// the same interface).
//
//   auto data = std::make_shared<frugal::TensorDataset>(inputs, targets);
//   frugal::DataLoader loader(data, frugal::DataLoaderOptions().batch_size(64));

#include <torch/types.h>

#include <memory>
#include <vector>

#include "frugal/data/batch.hpp"

namespace frugal {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// The examples at `indices` (each in [0, size())), stacked into one batch.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
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
