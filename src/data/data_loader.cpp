#include "frugal/data/data_loader.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <numeric>

#include "frugal/errors.hpp"

namespace frugal {

void DataLoaderOptions::validate() const {
  if (batch_size() < 1) {
    throw OptionError("batch_size", c10::str("batch_size must be >= 1, got ", batch_size()));
  }
  if (num_replicas() < 1) {
    throw OptionError("num_replicas", c10::str("num_replicas must be >= 1, got ", num_replicas()));
  }
  if (rank() < 0 || rank() >= num_replicas()) {
    throw OptionError("rank", c10::str("rank must be in [0, ", num_replicas(), "), got ", rank()));
  }
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  if (!dataset_) throw OptionError("dataset", "DataLoader: dataset is null");
  options_.validate();
  start_epoch(0);
}

int64_t DataLoader::examples_per_epoch() const {
  // Like DistributedSampler without drop_last: pad by wrapping around so every replica gets
  // the same number of examples (and so takes the same number of steps).
  const int64_t n = dataset_->size(), replicas = options_.num_replicas();
  if (!options_.even_shards()) return n / replicas + (options_.rank() < n % replicas ? 1 : 0);
  return (n + replicas - 1) / replicas;
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = examples_per_epoch();
  const int64_t b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

void DataLoader::start_epoch(int64_t epoch) {
  const int64_t n = dataset_->size();
  std::vector<int64_t> all(static_cast<size_t>(n));
  if (options_.shuffle()) {
    // A generator of our own, seeded from (seed, epoch): the order never depends on how much
    // of the global RNG the model used, and is the same on every replica.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(
        static_cast<uint64_t>(options_.seed()) * 1000003ULL + static_cast<uint64_t>(epoch));
    auto perm = torch::randperm(n, gen, torch::kLong);
    std::copy_n(perm.data_ptr<int64_t>(), n, all.begin());
  } else {
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const int64_t per_replica = examples_per_epoch();
  order_.resize(static_cast<size_t>(per_replica));
  for (int64_t i = 0; i < per_replica && n > 0; ++i) {
    order_[static_cast<size_t>(i)] =
        all[static_cast<size_t>((i * options_.num_replicas() + options_.rank()) % n)];
  }
  epoch_ = epoch;
  batch_index_ = 0;
}

std::optional<Batch> DataLoader::next() {
  if (!has_next()) return std::nullopt;
  const int64_t b = options_.batch_size();
  const int64_t begin = batch_index_ * b;
  const int64_t end = std::min<int64_t>(begin + b, static_cast<int64_t>(order_.size()));
  ++batch_index_;
  return dataset_->get_batch(std::vector<int64_t>(order_.begin() + begin, order_.begin() + end));
}

void DataLoader::shard(int64_t num_replicas, int64_t rank) {
  DataLoaderOptions options = options_;
  options.num_replicas(num_replicas).rank(rank);
  options.validate();
  options_ = options;
  start_epoch(epoch_);
}

void DataLoader::restore(const DataPosition& position) {
  if (position.seed != options_.seed()) {
    throw OptionError("seed", c10::str("data position was saved with shuffle seed ", position.seed,
                                       " but this loader uses seed ", options_.seed()));
  }
  if (position.batch_index < 0 || position.batch_index > batches_per_epoch()) {
    throw OptionError("batch_index", c10::str("data position batch_index ", position.batch_index,
                                              " is outside [0, ", batches_per_epoch(), "]"));
  }
  start_epoch(position.epoch);
  batch_index_ = position.batch_index;
}

}  // namespace frugal
