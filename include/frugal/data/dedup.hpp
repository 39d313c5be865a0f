#pragma once
// Offline deduplication of a sharded data set: exact duplicates by content hash (XXH3-128 over
// every field), near-duplicate texts by MinHash over word shingles with LSH banding, and
// near-duplicate images by a 64-bit difference hash (dHash) within a Hamming distance. The
// first occurrence is kept; every removal is reported with the sample it duplicates and the
// score. Off by default: curated sets (medical, legal) keep their rare near-repeats.
//
//   frugal::ShardWriter out("shards/dedup");
//   frugal::DedupResult r = frugal::deduplicate_shards(frugal::list_shards("shards/raw"), out,
//       frugal::DedupOptions().text_field("json:question").text_threshold(0.8), "dedup_report.jsonl");

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/data/sample.hpp"
#include "frugal/data/tar_shard.hpp"

namespace frugal {

struct DedupOptions {
  /// Field holding text for near-duplicate search: an extension ("txt") or "json:<key>" for a
  /// string member of a JSON field; "" = exact duplicates only.
  TORCH_ARG(std::string, text_field) = "";
  /// JPEG field for perceptual near-duplicate search ("jpg"); "" = none.
  TORCH_ARG(std::string, image_field) = "";
  /// Estimated Jaccard similarity of shingle sets at which a text counts as a duplicate.
  TORCH_ARG(double, text_threshold) = 0.8;
  TORCH_ARG(int64_t, shingle_words) = 3;
  TORCH_ARG(int64_t, num_hashes) = 128;
  /// LSH bands (num_hashes must be a multiple): more bands find pairs of lower similarity.
  TORCH_ARG(int64_t, bands) = 32;
  /// dHash bits (of 64) two images may differ in and still count as duplicates.
  TORCH_ARG(int64_t, image_max_distance) = 4;

 public:
  void validate() const;
};

struct Duplicate {
  std::string removed;  // key of the sample dropped
  std::string kept;     // key of the earlier sample it duplicates
  std::string reason;   // "exact", "near_text" or "near_image"
  double score = 1.0;   // exact: 1; text: estimated Jaccard; image: 1 - distance / 64
};

/// MinHash signature of the text's word shingles (lower-cased alphanumeric words).
std::vector<uint64_t> minhash_signature(const std::string& text, int64_t shingle_words, int64_t num_hashes);
/// Share of equal positions: an estimate of the Jaccard similarity of the shingle sets.
double estimated_jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);
/// Difference hash of an image (uint8 [H, W, 3] or [H, W]): 8 rows of 8 left/right comparisons
/// on a 9x8 grey thumbnail.
uint64_t difference_hash(const torch::Tensor& image);

/// Decides sample by sample, remembering the samples it keeps.
class Deduplicator {
 public:
  explicit Deduplicator(DedupOptions options);
  ~Deduplicator();
  /// nullopt: keep the sample; otherwise the earlier sample it duplicates.
  std::optional<Duplicate> check(const Sample& sample);

 private:
  struct State;
  DedupOptions options_;
  std::unique_ptr<State> state_;
};

struct DedupResult {
  int64_t scanned = 0;
  int64_t kept = 0;
  std::vector<Duplicate> removed;
  std::vector<ShardInfo> shards;
};

/// Reads `shards` in order, writes the samples kept to `out` and one JSON line per removal to
/// `report` ({"removed", "kept", "reason", "score"}).
DedupResult deduplicate_shards(const std::vector<std::filesystem::path>& shards, ShardWriter& out,
                               const DedupOptions& options, const std::filesystem::path& report);

}  // namespace frugal
