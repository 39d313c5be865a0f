#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

// A smooth picture with features at seeded places: distinct seeds give unrelated images.
torch::Tensor picture(uint64_t seed, int64_t size = 96) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto coarse = torch::rand({1, 3, 6, 6}, gen) * 255;
  auto image = torch::nn::functional::interpolate(
      coarse, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{size, size}).mode(torch::kBilinear).align_corners(false));
  return image.squeeze(0).permute({1, 2, 0}).round().clamp(0, 255).to(torch::kUInt8).contiguous();
}

const char* kTexts[] = {
    "The quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon in May",
    "Gradient accumulation lets a small card train with a large effective batch by summing micro batches",
    "Checkpoints are written to a temporary directory, synced to disk and renamed so that a crash never leaves half a file",
    "Near duplicate detection with minhash estimates the jaccard similarity of shingle sets in constant time",
    "A data loader that keeps the accelerator busy reads shards sequentially and decodes in worker threads",
};

}  // namespace

TEST_CASE("minhash estimates Jaccard similarity and dHash survives re-encoding", "[data]") {
  const auto a = minhash_signature(kTexts[0], 3, 256);
  std::string edited = kTexts[0];
  edited.replace(edited.find("sunny"), 5, "rainy");
  CHECK(estimated_jaccard(a, minhash_signature(edited, 3, 256)) == Approx(14.0 / 20).margin(0.12));  // 17 shingles, 3 changed
  CHECK(estimated_jaccard(a, minhash_signature(kTexts[1], 3, 256)) < 0.1);
  CHECK(estimated_jaccard(a, minhash_signature("THE quick, brown fox jumps over the lazy dog near the river bank on a sunny afternoon in May!", 3, 256)) == 1.0);

  const torch::Tensor image = picture(1);
  const uint64_t h = difference_hash(image);
  const torch::Tensor recoded = decode_jpeg(encode_jpeg((image.to(torch::kInt) + 6).clamp(0, 255).to(torch::kUInt8), 60), "x");
  CHECK(std::popcount(h ^ difference_hash(recoded)) <= 4);
  CHECK(std::popcount(h ^ difference_hash(picture(2))) > 12);
}

TEST_CASE("dedup removes planted exact and near duplicates, keeps distinct items, and reports every removal", "[data]") {
  const auto dir = scratch_dir("dedup");
  ShardWriter source(dir / "raw", ShardWriterOptions().target_bytes(8192));
  int64_t n = 0;
  auto add = [&](const std::string& text, const torch::Tensor& image) {
    char key[16];
    std::snprintf(key, sizeof key, "s%03lld", static_cast<long long>(n++));
    source.write({key, {{"txt", text}, {"jpg", encode_jpeg(image, 90)}}});
  };
  for (int i = 0; i < 5; ++i) add(kTexts[i], picture(10 + static_cast<uint64_t>(i)));     // s000-s004 distinct
  add(kTexts[2], picture(12));                                                               // s005: exact copy of s002
  std::string near = kTexts[3];
  near.replace(near.find("constant"), 8, "CONSTANT,");                                     // same words
  near += " indeed";
  add(near, picture(40));                                                                    // s006: near text of s003
  add("An entirely different sentence about optimisers and learning rate warm up schedules for transformers",
      decode_jpeg(encode_jpeg(picture(11), 70), "x"));                                       // s007: near image of s001
  add("Yet another sentence, this one about tokenisation of questions and contexts for reading comprehension",
      picture(50));                                                                          // s008 distinct
  source.finish();

  ShardWriter out(dir / "clean");
  const auto result = deduplicate_shards(list_shards(dir / "raw"), out,
                                         DedupOptions().text_field("txt").image_field("jpg").text_threshold(0.7), dir / "report.jsonl");
  CHECK(result.scanned == 9);
  CHECK(result.kept == 6);
  std::map<std::string, std::pair<std::string, std::string>> removed;
  for (const auto& d : result.removed) removed[d.removed] = {d.kept, d.reason};
  CHECK(removed.at("s005") == std::pair<std::string, std::string>{"s002", "exact"});
  CHECK(removed.at("s006") == std::pair<std::string, std::string>{"s003", "near_text"});
  CHECK(removed.at("s007") == std::pair<std::string, std::string>{"s001", "near_image"});

  std::ifstream report(dir / "report.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(report, line)) {
    const auto row = nlohmann::json::parse(line);
    CHECK(removed.count(row.at("removed").get<std::string>()) == 1);
    CHECK(row.at("score").get<double>() > 0.7);
    ++lines;
  }
  CHECK(lines == 3);
  std::set<std::string> kept;
  for (const auto& shard : list_shards(dir / "clean")) {
    ShardScanner scan(shard);
    while (auto s = scan.next()) kept.insert(s->key);
  }
  CHECK(kept == std::set<std::string>{"s000", "s001", "s002", "s003", "s004", "s008"});

  ShardWriter exact_only(dir / "exact");
  CHECK(deduplicate_shards(list_shards(dir / "raw"), exact_only, DedupOptions(), dir / "exact.jsonl").kept == 8);
}
