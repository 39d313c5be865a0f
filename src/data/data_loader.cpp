#include "frugal/data/data_loader.hpp"

#include <c10/util/StringUtil.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <numeric>

#include "data/detail/batch_buffers.hpp"
#include "data/detail/batch_prefetcher.hpp"
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
  if (num_workers() < 0) throw OptionError("num_workers", c10::str("num_workers must be >= 0, got ", num_workers()));
  if (worker_threads() < 0) {
    throw OptionError("worker_threads", c10::str("worker_threads must be >= 0, got ", worker_threads()));
  }
  if (prefetch_batches() < 1) {
    throw OptionError("prefetch_batches", c10::str("prefetch_batches must be >= 1, got ", prefetch_batches()));
  }
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)), buffers_(std::make_shared<detail::BatchBuffers>()) {
  if (!dataset_) throw OptionError("dataset", "DataLoader: dataset is null");
  options_.validate();
  if (options_.num_workers() > 0) {
    prefetcher_ = std::make_unique<detail::BatchPrefetcher>(options_.num_workers(), options_.prefetch_batches(),
                                                           options_.worker_threads());
  }
  start_epoch(0);
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

void DataLoader::stop_workers() {
  if (prefetcher_) prefetcher_->cancel();
}

void DataLoader::set_pin_memory(bool pin) {
  stop_workers();  // batches made before were not pinned
  options_.pin_memory(pin);
}

void DataLoader::copy_ahead_to(const torch::Device& device) {
  stop_workers();
  copy_to_ = device.is_cuda() ? std::optional<torch::Device>(device) : std::nullopt;
  if (copy_to_) options_.pin_memory(true);
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
  stop_workers();
  const int64_t n = dataset_->size();
  std::vector<int64_t> all;
  if (options_.shuffle()) {
    all = dataset_->shuffled_order(options_.seed(), epoch);
    if (static_cast<int64_t>(all.size()) != n) {
      throw Error(c10::str("Dataset::shuffled_order returned ", all.size(), " indices for ", n, " examples"));
    }
  } else {
    all.resize(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const int64_t per_replica = examples_per_epoch();
  auto order = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(per_replica));
  for (int64_t i = 0; i < per_replica && n > 0; ++i) {
    (*order)[static_cast<size_t>(i)] = all[static_cast<size_t>((i * options_.num_replicas() + options_.rank()) % n)];
  }
  order_ = std::move(order);
  epoch_ = epoch;
  batch_index_ = 0;
}

namespace {

// What making one batch needs, copied for the workers: the loader may move or change epoch
// while they run.
struct BatchRecipe {
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<const std::vector<int64_t>> order;
  int64_t batch_size;
  FetchContext context;
  bool pin_memory;
  std::optional<torch::Device> copy_to;  // a CUDA device, when workers copy ahead

  detail::PreparedBatch operator()(int64_t batch_index) const {
    const int64_t begin = batch_index * batch_size;
    const int64_t end = std::min<int64_t>(begin + batch_size, static_cast<int64_t>(order->size()));
    const std::vector<int64_t> indices(order->begin() + begin, order->begin() + end);
    if (copy_to) {
      // Device work of the dataset's own (GPU decoding) on the stream whose event the consumer waits on.
      const Batch batch = detail::on_side_stream(*copy_to, [&] { return dataset->fetch(indices, context); });
      return detail::copy_to_device_async(batch, *copy_to, context.buffers.get());
    }
    Batch batch = dataset->fetch(indices, context);
    return {pin_memory ? batch.pin_memory() : std::move(batch), {}};
  }
};

}  // namespace

std::optional<Batch> DataLoader::next() {
  if (!has_next()) return std::nullopt;
  const auto wait_start = std::chrono::steady_clock::now();
  struct AddWait {
    double& total;
    std::chrono::steady_clock::time_point start;
    ~AddWait() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  } add_wait{wait_seconds_, wait_start};
  const int64_t index = batch_index_++;
  static const bool have_cuda = torch::cuda::is_available();
  const bool pin = options_.pin_memory() && have_cuda;
  BatchRecipe recipe{dataset_, order_, options_.batch_size(), FetchContext{epoch_, options_.seed(), buffers_, pin}, pin,
                     std::nullopt};
  if (!prefetcher_) return recipe(index).batch;  // the caller copies: nothing would overlap anyway
  if (pin && copy_to_) recipe.copy_to = copy_to_;
  // Started lazily, so a restore right after construction reads nothing it skips.
  if (!prefetcher_->running()) prefetcher_->start(recipe, index, batches_per_epoch());
  detail::PreparedBatch prepared = prefetcher_->take(index);
  if (prepared.before_use) prepared.before_use();
  return std::move(prepared.batch);
}

std::vector<int64_t> DataLoader::examples_of(int64_t batch_index) const {
  if (!order_ || batch_index < 0 || batch_index >= batches_per_epoch()) return {};
  const int64_t begin = batch_index * options_.batch_size();
  const int64_t end = std::min<int64_t>(begin + options_.batch_size(), static_cast<int64_t>(order_->size()));
  return {order_->begin() + begin, order_->begin() + end};
}

void DataLoader::shard(int64_t num_replicas, int64_t rank) {
  DataLoaderOptions options = options_;
  options.num_replicas(num_replicas).rank(rank);
  options.validate();
  options_ = options;
  start_epoch(epoch_);
}

void DataLoader::set_batch_size(int64_t batch_size) {
  DataLoaderOptions options = options_;
  options.batch_size(batch_size);
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
