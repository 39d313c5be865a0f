#include "frugal/data/dedup.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <bit>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "data/detail/content_hash.hpp"
#include "frugal/data/image/jpeg.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace {

constexpr uint64_t kMersenne61 = (uint64_t{1} << 61) - 1;

uint64_t mod_mersenne61(__uint128_t x) {
  uint64_t r = static_cast<uint64_t>(x & kMersenne61) + static_cast<uint64_t>(x >> 61);
  r = (r & kMersenne61) + (r >> 61);
  return r >= kMersenne61 ? r - kMersenne61 : r;
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || u >= 0x80) {
      word.push_back(static_cast<char>(std::tolower(u)));
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

std::string text_of(const Sample& sample, const std::string& field) {
  if (field.rfind("json:", 0) != 0) return sample.field(field);
  const std::string key = field.substr(5);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(sample.field("json"));
  } catch (const nlohmann::json::exception& e) {
    throw DataError("sample '" + sample.key + "'", -1, std::string("field 'json' is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) {
    throw DataError("sample '" + sample.key + "'", -1, "field 'json' has no string member '" + key + "'");
  }
  return j[key].get<std::string>();
}

}  // namespace

void DedupOptions::validate() const {
  if (text_threshold() <= 0 || text_threshold() > 1) {
    throw OptionError("text_threshold", c10::str("text_threshold must be in (0, 1], got ", text_threshold()));
  }
  if (shingle_words() < 1) throw OptionError("shingle_words", c10::str("shingle_words must be >= 1, got ", shingle_words()));
  if (num_hashes() < 1 || bands() < 1 || num_hashes() % bands() != 0) {
    throw OptionError("bands", c10::str("num_hashes (", num_hashes(), ") must be a positive multiple of bands (", bands(), ")"));
  }
  if (image_max_distance() < 0 || image_max_distance() > 63) {
    throw OptionError("image_max_distance", c10::str("image_max_distance must be in [0, 63], got ", image_max_distance()));
  }
}

std::vector<uint64_t> minhash_signature(const std::string& text, int64_t shingle_words, int64_t num_hashes) {
  const std::vector<std::string> words = words_of(text);
  std::vector<uint64_t> shingles;
  const size_t k = static_cast<size_t>(shingle_words);
  for (size_t i = 0; i + k <= std::max(words.size(), k); ++i) {
    std::string shingle;
    for (size_t j = i; j < std::min(i + k, words.size()); ++j) shingle += words[j] + ' ';
    shingles.push_back(XXH3_64bits(shingle.data(), shingle.size()) & kMersenne61);
  }
  // h_i(x) = (a_i x + b_i) mod (2^61 - 1): a fixed family, so signatures compare across runs.
  std::mt19937_64 rng(0x5eed);
  std::vector<uint64_t> signature(static_cast<size_t>(num_hashes), kMersenne61);
  for (auto& slot : signature) {
    const uint64_t a = rng() % (kMersenne61 - 1) + 1, b = rng() % kMersenne61;
    for (const uint64_t x : shingles) slot = std::min(slot, mod_mersenne61(static_cast<__uint128_t>(a) * x + b));
  }
  return signature;
}

double estimated_jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (a.size() != b.size() || a.empty()) throw Error("estimated_jaccard: signatures of different lengths");
  size_t equal = 0;
  for (size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i];
  return static_cast<double>(equal) / static_cast<double>(a.size());
}

uint64_t difference_hash(const torch::Tensor& image) {
  torch::Tensor grey = image.to(torch::kFloat);
  if (grey.dim() == 3) grey = grey.mean(2);
  // Area averaging to 8 rows x 9 columns, then each pixel against its right neighbour.
  grey = torch::adaptive_avg_pool2d(grey.unsqueeze(0).unsqueeze(0), {8, 9}).squeeze().contiguous();
  const auto g = grey.accessor<float, 2>();
  uint64_t hash = 0;
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) hash = (hash << 1) | (g[r][c] > g[r][c + 1] ? 1 : 0);
  }
  return hash;
}

struct Deduplicator::State {
  std::unordered_map<std::string, std::string> exact;  // content hash → key kept
  std::vector<std::string> kept_text_keys;
  std::vector<std::vector<uint64_t>> signatures;
  std::unordered_map<uint64_t, std::vector<uint32_t>> text_buckets;  // band hash → kept texts
  std::vector<std::string> kept_image_keys;
  std::vector<uint64_t> image_hashes;
  std::unordered_map<uint64_t, std::vector<uint32_t>> image_buckets;  // (chunk, bits) → kept images
};

Deduplicator::Deduplicator(DedupOptions options) : options_(std::move(options)), state_(std::make_unique<State>()) {
  options_.validate();
}
Deduplicator::~Deduplicator() = default;

std::optional<Duplicate> Deduplicator::check(const Sample& sample) {
  State& s = *state_;
  detail::ContentHash hasher;
  for (const auto& [ext, bytes] : sample.fields) {
    hasher.add_part(ext);
    hasher.add_part(bytes);
  }
  const std::string content = hasher.bytes();
  if (auto it = s.exact.find(content); it != s.exact.end()) return Duplicate{sample.key, it->second, "exact", 1.0};

  std::vector<uint64_t> signature;
  std::vector<uint64_t> band_keys;
  if (!options_.text_field().empty()) {
    signature = minhash_signature(text_of(sample, options_.text_field()), options_.shingle_words(), options_.num_hashes());
    const size_t rows = static_cast<size_t>(options_.num_hashes() / options_.bands());
    std::unordered_set<uint32_t> seen;
    for (size_t band = 0; band < static_cast<size_t>(options_.bands()); ++band) {
      band_keys.push_back(XXH3_64bits_withSeed(signature.data() + band * rows, rows * sizeof(uint64_t), band));
      for (const uint32_t other : s.text_buckets[band_keys.back()]) {
        if (!seen.insert(other).second) continue;
        const double similarity = estimated_jaccard(signature, s.signatures[other]);
        if (similarity >= options_.text_threshold()) return Duplicate{sample.key, s.kept_text_keys[other], "near_text", similarity};
      }
    }
  }
  uint64_t image_hash = 0;
  std::vector<uint64_t> chunk_keys;
  if (!options_.image_field().empty()) {
    // DCT-scaled decode: a thumbnail of at least 32 pixels a side is plenty for a 9x8 hash.
    image_hash = difference_hash(decode_jpeg(sample.field(options_.image_field()), sample.key, 32, 32));
    // Pigeonhole: with d+1 chunks, two hashes within distance d agree exactly on one chunk.
    const int chunks = static_cast<int>(options_.image_max_distance()) + 1;
    std::unordered_set<uint32_t> seen;
    for (int c = 0; c < chunks; ++c) {
      const int lo = 64 * c / chunks, hi = 64 * (c + 1) / chunks;
      const uint64_t mask = (hi - lo == 64 ? ~uint64_t{0} : ((uint64_t{1} << (hi - lo)) - 1)) << lo;
      const uint64_t chunk = image_hash & mask;
      chunk_keys.push_back(XXH3_64bits_withSeed(&chunk, sizeof chunk, static_cast<uint64_t>(c)));
      for (const uint32_t other : s.image_buckets[chunk_keys.back()]) {
        if (!seen.insert(other).second) continue;
        const int distance = std::popcount(image_hash ^ s.image_hashes[other]);
        if (distance <= options_.image_max_distance()) {
          return Duplicate{sample.key, s.kept_image_keys[other], "near_image", 1.0 - distance / 64.0};
        }
      }
    }
  }

  // Kept: remember it.
  s.exact.emplace(content, sample.key);
  if (!signature.empty()) {
    const auto id = static_cast<uint32_t>(s.signatures.size());
    s.signatures.push_back(std::move(signature));
    s.kept_text_keys.push_back(sample.key);
    for (const uint64_t key : band_keys) s.text_buckets[key].push_back(id);
  }
  if (!chunk_keys.empty()) {
    const auto id = static_cast<uint32_t>(s.image_hashes.size());
    s.image_hashes.push_back(image_hash);
    s.kept_image_keys.push_back(sample.key);
    for (const uint64_t key : chunk_keys) s.image_buckets[key].push_back(id);
  }
  return std::nullopt;
}

DedupResult deduplicate_shards(const std::vector<std::filesystem::path>& shards, ShardWriter& out,
                               const DedupOptions& options, const std::filesystem::path& report) {
  Deduplicator dedup(options);
  std::ofstream report_file(report);
  if (!report_file) throw DataError(report.string(), -1, "cannot write the dedup report");
  DedupResult result;
  for (const auto& shard : shards) {
    ShardScanner scan(shard);
    while (auto sample = scan.next()) {
      ++result.scanned;
      if (auto duplicate = dedup.check(*sample)) {
        report_file << nlohmann::json{{"removed", duplicate->removed}, {"kept", duplicate->kept},
                                      {"reason", duplicate->reason}, {"score", duplicate->score},
                                      {"shard", shard.filename().string()}}
                           .dump()
                    << '\n';
        result.removed.push_back(std::move(*duplicate));
      } else {
        out.write(*sample);
        ++result.kept;
      }
    }
  }
  report_file.close();
  if (!report_file) throw DataError(report.string(), -1, "writing the dedup report failed");
  result.shards = out.finish();
  return result;
}

}  // namespace frugal
