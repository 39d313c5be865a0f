#pragma once
// Offline augmentation: K augmented variants of every sample, computed once and stored in
// shards as "aug0.<ext>" ... "aug<K-1>.<ext>" fields beside the fields all variants share (the
// label). A ShardedDataset opened with variants(K) presents one variant per sample per epoch,
// so the per-epoch cost of augmenting is gone. Opt-in: it trades fresh randomness every epoch
// for K fixed draws, which is fine for many epochs of mild augmentation and not for heavy
// augmentation over long runs.
//
//   frugal::ShardWriter out("shards/train-aug");
//   frugal::write_augmented_shards(frugal::list_shards("shards/train"), out, 4,
//                                  frugal::jitter_npy("npy", 0.05), /*seed=*/7);
//   auto data = std::make_shared<frugal::ShardedDataset>("shards/train-aug", decode,
//                                                        frugal::ShardedDatasetOptions().variants(4));

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "frugal/data/sample.hpp"
#include "frugal/data/tar_shard.hpp"

namespace frugal {

/// Makes one variant of a sample from `seed` (fixed per sample and variant): the fields it
/// returns are stored under "aug<k>."; fields it does not return are shared by every variant.
using Augmentation = std::function<std::map<std::string, std::string>(const Sample& sample, uint64_t seed)>;

/// Adds Gaussian noise of standard deviation `sigma` to the float NPY field `field`.
Augmentation jitter_npy(std::string field, double sigma);
/// Random horizontal flip and random resized crop (area `min_scale`..1, aspect 3/4..4/3) of the
/// JPEG field `field`, back to the original size, re-encoded at `quality`.
Augmentation flip_crop_jpeg(std::string field, double min_scale = 0.35, int quality = 90);
/// Parses "jitter:FIELD:SIGMA" or "flip_crop:FIELD[:MIN_SCALE]" (the command-line tool's --op).
Augmentation parse_augmentation(const std::string& spec);

struct AugmentResult {
  int64_t samples = 0;
  std::vector<ShardInfo> shards;
};

/// Reads `source` in order and writes each sample with `variants` augmented variants to `out`.
AugmentResult write_augmented_shards(const std::vector<std::filesystem::path>& source, ShardWriter& out,
                                     int64_t variants, const Augmentation& augment, uint64_t seed);

}  // namespace frugal
