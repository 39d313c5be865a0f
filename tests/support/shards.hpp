#pragma once
// Test helpers for the data pipeline: numbered samples written to shards, and their decoder.

#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "frugal/frugal.hpp"

namespace frugal::testing {

/// Sample i: "npy" = float [2] {i, -i}, "cls" = i % 3.
inline Sample numbered_sample(int64_t i) {
  char key[16];
  std::snprintf(key, sizeof key, "%06lld", static_cast<long long>(i));
  const auto value = static_cast<float>(i);
  return {key, {{"npy", encode_npy(torch::tensor({value, -value}))}, {"cls", std::to_string(i % 3)}}};
}

/// `n` numbered samples in shards of about `target_bytes`.
inline std::vector<ShardInfo> write_numbered_shards(const std::filesystem::path& dir, int64_t n,
                                                    int64_t target_bytes = 4096) {
  ShardWriter writer(dir, ShardWriterOptions().target_bytes(target_bytes));
  for (int64_t i = 0; i < n; ++i) writer.write(numbered_sample(i));
  return writer.finish();
}

/// input = the npy tensor, target = the class.
inline SampleDecoder numbered_decoder() {
  return [](const Sample& s, const SampleContext&) {
    return Batch{decode_npy(s.field("npy"), s.key + ".npy"), torch::tensor(static_cast<int64_t>(std::stoll(s.field("cls")))), {}};
  };
}

/// The sample numbers of a batch of numbered samples (input[:, 0]).
inline std::vector<int64_t> numbers_of(const Batch& batch) {
  auto column = batch.input.select(1, 0).to(torch::kLong).contiguous();
  return {column.data_ptr<int64_t>(), column.data_ptr<int64_t>() + column.numel()};
}

}  // namespace frugal::testing
