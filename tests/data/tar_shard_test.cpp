#include <catch2/catch.hpp>

#include <fstream>

#include "support/fixtures.hpp"
#include "support/python_reference.hpp"
#include "support/shards.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

void overwrite(const fs::path& file, int64_t offset, const std::string& bytes) {
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("shards round-trip: scanning and indexed reads return every sample, and rewriting is byte-identical", "[data]") {
  const auto dir = scratch_dir("shards_round_trip");
  const auto shards = write_numbered_shards(dir / "a", 40, 4096);
  REQUIRE(shards.size() > 2);
  int64_t total = 0, number = 0;
  for (const auto& info : shards) {
    REQUIRE(fs::exists(index_path(info.path)));
    ShardScanner scan(info.path);
    const ShardIndex index = load_shard_index(info.path);
    REQUIRE(index.size() == info.samples);
    int64_t i = 0;
    while (auto sample = scan.next()) {
      const Sample expected = numbered_sample(number++);
      CHECK(sample->key == expected.key);
      CHECK(sample->fields == expected.fields);
      CHECK(scan.sample_offset() == index.offsets[static_cast<size_t>(i)]);
      CHECK(read_indexed_sample(index, i).fields == expected.fields);
      ++i;
    }
    total += i;
  }
  CHECK(total == 40);
  const auto again = write_numbered_shards(dir / "b", 40, 4096);
  REQUIRE(again.size() == shards.size());
  for (size_t s = 0; s < shards.size(); ++s) CHECK(bytes_of(again[s].path) == bytes_of(shards[s].path));
  CHECK_FALSE(fs::exists(dir / "a" / "shard-000000.tar.tmp"));
}

TEST_CASE("member names and keys follow webdataset's rule and unsafe names are refused", "[data]") {
  CHECK(split_member_name("dir/000123.seg.jpg") == std::pair<std::string, std::string>{"dir/000123", "seg.jpg"});
  CHECK(split_member_name("a.b/c") == std::pair<std::string, std::string>{"a.b/c", ""});
  CHECK(is_unsafe_member_name("../x.txt"));
  CHECK(is_unsafe_member_name("a/../../x.txt"));
  CHECK(is_unsafe_member_name("/etc/passwd"));
  CHECK_FALSE(is_unsafe_member_name("a/..b/x.txt"));
  const auto dir = scratch_dir("shards_unsafe_write");
  ShardWriter writer(dir);
  CHECK_THROWS_AS(writer.write({"../escape", {{"txt", "x"}}}), DataError);
  CHECK_THROWS_AS(writer.write({"k", {}}), DataError);
  writer.write({"k", {{"txt", "x"}}});
  CHECK_THROWS_WITH(writer.write({"k", {{"cls", "1"}}}), Catch::Contains("repeats the key"));
}

TEST_CASE("malicious shards from Python are refused with the file and offset of the bad member", "[data][python]") {
  const auto dir = scratch_dir("shards_malicious");
  run_python_reference("webdataset_tar.py", "malicious " + dir.string());
  auto fails_with = [&](const std::string& shard, const std::string& text, int64_t offset) {
    try {
      build_shard_index(dir / shard);
      FAIL("no error for " << shard);
    } catch (const DataError& e) {
      INFO(e.what());
      CHECK(e.file() == (dir / shard).string());
      CHECK(e.offset() == offset);
      CHECK_THAT(e.what(), Catch::Contains(text));
    }
  };
  fails_with("dotdot.tar", "unsafe path", 1024);       // second member: after one header + one data block
  fails_with("absolute.tar", "unsafe path", 1024);
  fails_with("symlink.tar", "not a regular file", 1024);
}

TEST_CASE("a truncated or corrupt shard names its file and offset, or is cut short and counted when skipping", "[data]") {
  const auto dir = scratch_dir("shards_damaged");
  const auto shards = write_numbered_shards(dir, 10, 1 << 20);
  const fs::path shard = shards.front().path;
  const ShardIndex good = load_shard_index(shard);
  REQUIRE(good.size() == 10);

  SECTION("truncated inside sample 6") {
    fs::resize_file(shard, static_cast<uintmax_t>(good.offsets[6] + 700));
    try {
      build_shard_index(shard);
      FAIL("no error");
    } catch (const DataError& e) {
      CHECK(e.file() == shard.string());
      CHECK(e.offset() >= good.offsets[6]);
      CHECK_THAT(e.what(), Catch::Contains("truncated"));
    }
    const ShardIndex partial = build_shard_index(shard, OnCorrupt::skip);
    CHECK(partial.size() == 6);
    CHECK(partial.damage.has_value());
    ShardedDataset skipping(shard, numbered_decoder(), ShardedDatasetOptions().on_corrupt(OnCorrupt::skip));
    CHECK(skipping.size() == 6);  // every sample before the damage, each one whole
    CHECK(skipping.samples_skipped() == 1);
    CHECK(numbers_of(skipping.get_batch({0, 1, 2, 3, 4, 5})) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
    CHECK_THROWS_AS(ShardedDataset(shard, numbered_decoder()), DataError);  // a stale index is not trusted
  }
  SECTION("a corrupt header checksum in sample 3") {
    overwrite(shard, good.offsets[3] + 148, "99999999");  // the header's checksum field
    try {
      build_shard_index(shard);
      FAIL("no error");
    } catch (const DataError& e) {
      CHECK(e.offset() == good.offsets[3]);
    }
  }
  SECTION("a size field in base-256 claiming 2^62 bytes is a data error, not an allocation") {
    // The ustar size field (12 bytes at 124) in GNU's base-256 form, then the header checksum redone.
    std::string size(12, '\0');
    size[0] = static_cast<char>(0x80);
    size[4] = 0x40;  // big-endian 2^62 in the last 8 bytes
    overwrite(shard, good.offsets[3] + 124, size);
    std::string header(512, '\0');
    {
      std::ifstream in(shard, std::ios::binary);
      in.seekg(good.offsets[3]);
      in.read(header.data(), 512);
    }
    header.replace(148, 8, "        ");
    unsigned sum = 0;
    for (const char c : header) sum += static_cast<unsigned char>(c);
    char field[8];
    std::snprintf(field, sizeof field, "%06o", sum);
    overwrite(shard, good.offsets[3] + 148, std::string(field, 6) + std::string("\0 ", 2));
    try {
      ShardScanner scan(shard);
      while (scan.next()) {
      }
      FAIL("no error");
    } catch (const DataError& e) {
      CHECK(e.file() == shard.string());
      CHECK(e.offset() == good.offsets[3]);
    }
    CHECK_THROWS_AS(build_shard_index(shard), DataError);
    CHECK(build_shard_index(shard, OnCorrupt::skip).size() == 3);
  }
  SECTION("a shard that shrank after indexing fails the indexed read with its offset") {
    ShardIndex stale = good;
    fs::resize_file(shard, static_cast<uintmax_t>(good.offsets[8]));
    try {
      read_indexed_sample(stale, 9);
      FAIL("no error");
    } catch (const DataError& e) {
      CHECK(e.offset() == good.offsets[9]);
      CHECK_THAT(e.what(), Catch::Contains("shorter than its index"));
    }
  }
}

TEST_CASE("shards written by Frugal read back in Python's tarfile with webdataset grouping", "[data][python]") {
  const auto dir = scratch_dir("shards_to_python");
  ShardWriter writer(dir, ShardWriterOptions().target_bytes(2048));
  std::vector<Sample> samples;
  for (int i = 0; i < 9; ++i) {
    const std::string key = i == 4 ? std::string("deep/").append(130, 'y').append("/s4") : c10::str("s", i);
    samples.push_back({key, {{"npy", encode_npy(torch::arange(6, torch::kFloat).reshape({2, 3}) * i)},
                             {"cls", std::to_string(i)},
                             {"seg.txt", c10::str("wörds ", i)}}});
    writer.write(samples.back());
  }
  REQUIRE(writer.finish().size() > 1);
  const auto result = run_python_reference("webdataset_tar.py", "read " + dir.string());
  const auto& read = result.at("samples");
  REQUIRE(read.size() == samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    CHECK(read[i].at("key") == samples[i].key);
    CHECK(read[i].at("fields").at("cls").at("text") == samples[i].fields.at("cls"));
    CHECK(read[i].at("fields").at("seg.txt").at("text") == samples[i].fields.at("seg.txt"));
    CHECK(read[i].at("fields").at("npy").at("npy").at("dtype") == "float32");
    CHECK(read[i].at("fields").at("npy").at("npy").at("sum") == Approx(15.0 * static_cast<double>(i)));
  }
}

TEST_CASE("shards written by Python's tarfile (GNU and pax, long names, numpy .npy) read in Frugal", "[data][python]") {
  const auto dir = scratch_dir("shards_from_python");
  const auto written = run_python_reference("webdataset_tar.py", "write " + dir.string()).at("samples");
  std::vector<Sample> read;
  for (const auto& shard : list_shards(dir)) {
    ShardScanner scan(shard);
    while (auto sample = scan.next()) read.push_back(*sample);
  }
  REQUIRE(read.size() == written.size());
  ShardedDataset data(dir, numbered_decoder());
  REQUIRE(data.size() == static_cast<int64_t>(written.size()));
  for (size_t i = 0; i < read.size(); ++i) {
    INFO(read[i].key);
    CHECK(read[i].key == written[i].at("key").get<std::string>());
    CHECK(read[i].fields.at("cls") == written[i].at("fields").at("cls").at("text").get<std::string>());
    CHECK(read[i].fields.at("json") == written[i].at("fields").at("json").at("text").get<std::string>());
    CHECK(read[i].fields.at("seg.txt") == written[i].at("fields").at("seg.txt").at("text").get<std::string>());
    const torch::Tensor x = decode_npy(read[i].fields.at("npy"), read[i].key);
    CHECK(x.sizes() == torch::IntArrayRef({3, 2}));
    CHECK(x.to(torch::kDouble).sum().item<double>() == Approx(written[i].at("fields").at("npy").at("npy").at("sum").get<double>()));
    CHECK(data.read_sample(static_cast<int64_t>(i)).fields == read[i].fields);
  }
}
