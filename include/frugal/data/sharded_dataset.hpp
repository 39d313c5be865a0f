#pragma once
// A Dataset streamed from tar shards (WebDataset layout). Each shard's index gives random access
// to any sample with one sequential read, so DataLoader's order, replica shares and resumable
// position work unchanged; a resumed run reads none of the samples it skips. A shuffled epoch
// permutes the shards, then shuffles within a buffer (as webdataset's shuffle does), so reads
// stay near-sequential and the OS reads ahead. A decoder turns each raw sample into tensors;
// DataLoader's worker threads run it, several at once.
//
//   auto data = std::make_shared<frugal::ShardedDataset>("shards/train",
//       [](const frugal::Sample& s, const frugal::SampleContext&) {
//         return frugal::Batch{frugal::decode_npy(s.field("npy"), s.key), torch::tensor(int64_t{std::stoll(s.field("cls"))}), {}};
//       }, frugal::ShardedDatasetOptions().shuffle_buffer(2048));
//   frugal::DataLoader loader(data, frugal::DataLoaderOptions().batch_size(64).num_workers(4));

#include <torch/arg.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "frugal/data/dataset.hpp"
#include "frugal/data/sample.hpp"
#include "frugal/data/tar_shard.hpp"

namespace frugal {

/// Where a sample is being decoded: random transforms seed themselves from sample_seed(), so the
/// result depends on (seed, epoch, index) only, never on the thread that decodes it.
struct SampleContext {
  int64_t index = 0;
  int64_t epoch = 0;
  int64_t seed = 0;
  uint64_t sample_seed() const;
};

/// One raw sample → the tensors of one example, without a batch dimension (they are stacked).
using SampleDecoder = std::function<Batch(const Sample&, const SampleContext&)>;

struct ShardedDatasetOptions {
  /// Samples held by the shuffle buffer; 1 keeps each shard in order (shards still permuted).
  TORCH_ARG(int64_t, shuffle_buffer) = 1024;
  /// A damaged shard or undecodable sample: an error naming file and offset, or a counted skip
  /// (the batch is then smaller by the samples skipped).
  TORCH_ARG(OnCorrupt, on_corrupt) = OnCorrupt::error;
  /// Offline augmentation: samples hold "aug0." ... "aug<K-1>." fields and each epoch presents
  /// one variant per sample ((epoch + a per-sample offset) mod K: every variant once in K epochs).
  TORCH_ARG(int64_t, variants) = 0;
  /// Write a missing or stale "<shard>.idx.json" beside the shard (skipped if read-only).
  TORCH_ARG(bool, write_index) = true;

 public:
  void validate() const;
};

class ShardedDataset : public Dataset {
 public:
  ShardedDataset(std::vector<std::filesystem::path> shards, SampleDecoder decode, ShardedDatasetOptions options = {});
  /// Every "*.tar" in `directory` (or the one shard `directory` names), in name order.
  ShardedDataset(const std::filesystem::path& directory, SampleDecoder decode, ShardedDatasetOptions options = {});

  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override { return fetch(indices, {}); }
  Batch fetch(const std::vector<int64_t>& indices, const FetchContext& context) const override;
  std::vector<int64_t> shuffled_order(int64_t seed, int64_t epoch) const override;

  /// The raw sample at `index` as epoch `context.epoch` presents it (its variant chosen).
  Sample read_sample(int64_t index, const FetchContext& context = {}) const;
  const std::string& key(int64_t index) const;
  /// The shard file and byte offset of sample `index` (for error messages).
  std::pair<std::filesystem::path, int64_t> location(int64_t index) const;
  /// Counts a sample a batch left out as corrupt (on_corrupt = skip), for samples_skipped().
  void count_skipped() const { ++samples_skipped_; }
  const std::vector<ShardIndex>& shards() const { return shards_; }
  const ShardedDatasetOptions& options() const { return options_; }

  /// Samples read from disk so far (tests check that a resume reads none it skips).
  int64_t samples_read() const { return samples_read_.load(); }
  /// Samples skipped as corrupt (on_corrupt = skip), plus shards cut short by damage.
  int64_t samples_skipped() const { return samples_skipped_.load(); }

 private:
  std::pair<size_t, int64_t> locate(int64_t index) const;  // (shard, sample within it)

  std::vector<ShardIndex> shards_;
  std::vector<int64_t> starts_;  // global index of each shard's first sample
  int64_t size_ = 0;
  SampleDecoder decode_;
  ShardedDatasetOptions options_;
  mutable std::atomic<int64_t> samples_read_{0};
  mutable std::atomic<int64_t> samples_skipped_{0};
};

/// Stacks examples (tensors without a batch dimension) into one batch, field by field.
Batch collate(const std::vector<Batch>& examples);

/// Selects variant `variant` of an offline-augmented sample: "aug<k>.x" fields become "x",
/// other variants are dropped, fields shared by all variants stay.
Sample select_variant(Sample sample, int64_t variant);

}  // namespace frugal
