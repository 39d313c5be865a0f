#include "frugal/data/sharded_dataset.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <random>

#include "data/detail/batch_buffers.hpp"
#include "data/detail/decode_samples.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace {

// splitmix64: decorrelates seeds built from small consecutive numbers.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t mix(uint64_t a, uint64_t b) { return mix(mix(a) ^ b); }

}  // namespace

uint64_t SampleContext::sample_seed() const {
  return mix(mix(static_cast<uint64_t>(seed), static_cast<uint64_t>(epoch)), static_cast<uint64_t>(index));
}

void ShardedDatasetOptions::validate() const {
  if (shuffle_buffer() < 1) throw OptionError("shuffle_buffer", c10::str("shuffle_buffer must be >= 1, got ", shuffle_buffer()));
  if (variants() < 0) throw OptionError("augmented_variants", c10::str("variants must be >= 0, got ", variants()));
}

ShardedDataset::ShardedDataset(std::vector<std::filesystem::path> shards, SampleDecoder decode,
                               ShardedDatasetOptions options)
    : decode_(std::move(decode)), options_(std::move(options)) {
  options_.validate();
  if (!decode_) throw OptionError("decode", "ShardedDataset: a sample decoder is required");
  if (shards.empty()) throw OptionError("shards", "ShardedDataset: no shards given");
  for (const auto& path : shards) {
    shards_.push_back(load_shard_index(path, options_.on_corrupt(), options_.write_index()));
    if (shards_.back().damage) samples_skipped_ += 1;
    starts_.push_back(size_);
    size_ += shards_.back().size();
  }
  if (size_ == 0) throw DataError(shards.front().string(), -1, "the shards hold no samples");
}

ShardedDataset::ShardedDataset(const std::filesystem::path& directory, SampleDecoder decode, ShardedDatasetOptions options)
    : ShardedDataset(list_shards(directory), std::move(decode), std::move(options)) {}

std::pair<size_t, int64_t> ShardedDataset::locate(int64_t index) const {
  if (index < 0 || index >= size_) throw OptionError("index", c10::str("sample index ", index, " is outside [0, ", size_, ")"));
  const auto shard = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
  return {shard, index - starts_[shard]};
}

std::pair<std::filesystem::path, int64_t> ShardedDataset::location(int64_t index) const {
  auto [shard, local] = locate(index);
  return {shards_[shard].shard, shards_[shard].offsets[static_cast<size_t>(local)]};
}

const std::string& ShardedDataset::key(int64_t index) const {
  auto [shard, local] = locate(index);
  return shards_[shard].keys[static_cast<size_t>(local)];
}

namespace {

// "aug3.npy" → 3; any other extension → -1.
int64_t variant_of(const std::string& ext) {
  if (ext.rfind("aug", 0) != 0) return -1;
  size_t i = 3;
  int64_t k = 0;
  while (i < ext.size() && ext[i] >= '0' && ext[i] <= '9' && i < 12) k = k * 10 + (ext[i++] - '0');
  return i > 3 && i < ext.size() && ext[i] == '.' ? k : -1;
}

}  // namespace

Sample select_variant(Sample sample, int64_t variant) {
  const std::string prefix = c10::str("aug", variant, ".");
  Sample out{std::move(sample.key), {}};
  bool found = false;
  for (auto& [ext, bytes] : sample.fields) {
    const int64_t k = variant_of(ext);
    if (k < 0) {
      out.fields.emplace(ext, std::move(bytes));  // shared by every variant (e.g. the label)
    } else if (k == variant) {
      out.fields[ext.substr(prefix.size())] = std::move(bytes);
      found = true;
    }
  }
  if (!found) throw DataError("sample '" + out.key + "'", -1, c10::str("has no augmented variant ", variant, " (aug", variant, ".* fields)"));
  return out;
}

Sample ShardedDataset::read_sample(int64_t index, const FetchContext& context) const {
  auto [shard, local] = locate(index);
  Sample sample = read_indexed_sample(shards_[shard], local);
  ++samples_read_;
  if (options_.variants() > 0) {
    const uint64_t offset = mix(static_cast<uint64_t>(context.seed), static_cast<uint64_t>(index));
    const auto k = static_cast<int64_t>((static_cast<uint64_t>(context.epoch) + offset) % static_cast<uint64_t>(options_.variants()));
    sample = select_variant(std::move(sample), k);
  }
  return sample;
}

Batch ShardedDataset::fetch(const std::vector<int64_t>& indices, const FetchContext& context) const {
  // A decoder knows the sample, not where it lives: its errors gain the shard file and offset.
  auto located_decode = [this](const Sample& sample, const SampleContext& sample_context) {
    try {
      return decode_(sample, sample_context);
    } catch (const DataError& e) {
      const auto [shard, local] = locate(sample_context.index);
      const ShardIndex& index = shards_[shard];
      if (e.file() == index.shard.string()) throw;
      throw DataError(index.shard.string(), index.offsets[static_cast<size_t>(local)], "sample '" + sample.key + "': " + e.what());
    }
  };
  return detail::decode_samples(
      indices, [&](int64_t index) { return read_sample(index, context); }, located_decode, context, options_.on_corrupt(),
      samples_skipped_);
}

std::vector<int64_t> ShardedDataset::shuffled_order(int64_t seed, int64_t epoch) const {
  std::mt19937_64 rng(mix(static_cast<uint64_t>(seed), static_cast<uint64_t>(epoch)));
  auto below = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<size_t> shard_order(shards_.size());
  for (size_t i = 0; i < shard_order.size(); ++i) shard_order[i] = i;
  for (size_t i = shard_order.size(); i > 1; --i) std::swap(shard_order[i - 1], shard_order[below(i)]);

  // webdataset's buffer shuffle on indices: fill the buffer, then each new sample displaces a
  // random one, which is emitted.
  const auto capacity = static_cast<size_t>(options_.shuffle_buffer());
  std::vector<int64_t> order, buffer;
  order.reserve(static_cast<size_t>(size_));
  buffer.reserve(capacity);
  for (const size_t shard : shard_order) {
    for (int64_t i = 0; i < shards_[shard].size(); ++i) {
      const int64_t index = starts_[shard] + i;
      if (buffer.size() < capacity) {
        buffer.push_back(index);
        continue;
      }
      int64_t& slot = buffer[below(capacity)];
      order.push_back(slot);
      slot = index;
    }
  }
  for (size_t i = buffer.size(); i > 1; --i) std::swap(buffer[i - 1], buffer[below(i)]);
  order.insert(order.end(), buffer.begin(), buffer.end());
  return order;
}

Batch collate(const std::vector<Batch>& examples) { return detail::collate_into(examples, nullptr, false); }

namespace detail {

Batch collate_into(const std::vector<Batch>& examples, BatchBuffers* buffers, bool pinned) {
  if (examples.empty()) throw Error("collate: no examples");
  auto stack = [&](auto get) -> torch::Tensor {
    if (!get(examples.front()).defined()) return {};
    std::vector<torch::Tensor> parts;
    parts.reserve(examples.size());
    for (const auto& e : examples) parts.push_back(get(e));
    return stack_into(parts, buffers, pinned);
  };
  Batch batch;
  batch.input = stack([](const Batch& b) { return b.input; });
  batch.target = stack([](const Batch& b) { return b.target; });
  for (const auto& [name, tensor] : examples.front().extra) {
    batch.extra[name] = stack([&name](const Batch& b) {
      auto it = b.extra.find(name);
      if (it == b.extra.end()) throw Error("collate: an example lacks the field '" + name + "'");
      return it->second;
    });
  }
  return batch;
}

}  // namespace detail

}  // namespace frugal
