#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <thread>

#include "support/fixtures.hpp"
#include "support/shards.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

TEST_CASE("preprocessing cache: a hit on the second run, a miss after any change to source, config or version", "[data]") {
  const auto dir = scratch_dir("preprocess_cache");
  const fs::path source = dir / "source.txt";
  std::ofstream(source) << "one two three";
  PreprocessCache cache(dir / "cache");
  int builds = 0;
  auto build = [&](const fs::path& out) {
    ++builds;
    write_numbered_shards(out, 5);
  };
  CacheKey key{"numbers", 1, "n=5", fingerprint_files({source})};
  const auto first = cache.get_or_build(key, build);
  CHECK_FALSE(first.hit);
  CHECK(ShardedDataset(first.dir, numbered_decoder()).size() == 5);
  const auto second = cache.get_or_build(key, build);
  CHECK(second.hit);
  CHECK(second.dir == first.dir);
  CHECK(builds == 1);

  CacheKey other_config = key;
  other_config.config = "n=6";
  CHECK_FALSE(cache.get_or_build(other_config, build).hit);
  CacheKey other_version = key;
  other_version.version = 2;
  CHECK_FALSE(cache.get_or_build(other_version, build).hit);
  std::ofstream(source) << "one two four!";
  CacheKey other_source = key;
  other_source.source = fingerprint_files({source});
  CHECK(other_source.source != key.source);
  CHECK_FALSE(cache.get_or_build(other_source, build).hit);
  CHECK(builds == 4);
  CHECK(cache.get_or_build(key, build).hit);  // the old entry is still there
  CHECK(fingerprint_files({source}, Fingerprint::metadata) != fingerprint_files({source}));
}

TEST_CASE("preprocessing cache: a build that fails leaves no entry, and a damaged entry is rebuilt", "[data]") {
  const auto dir = scratch_dir("preprocess_cache_failure");
  PreprocessCache cache(dir);
  const CacheKey key{"numbers", 1, "", "generated"};
  CHECK_THROWS_WITH(cache.get_or_build(key, [](const fs::path& out) {
    write_numbered_shards(out, 3);
    throw std::runtime_error("tokeniser crashed");
  }), Catch::Contains("tokeniser crashed"));
  for (const auto& left : fs::directory_iterator(dir)) {
    INFO(left.path());
    CHECK(left.path().extension() == ".lock");  // no entry, partial or whole; only the lock file
  }
  const auto entry = cache.get_or_build(key, [](const fs::path& out) { write_numbered_shards(out, 3); });
  std::ofstream(entry.dir / "cache.json") << "{ not json";
  int builds = 0;
  const auto rebuilt = cache.get_or_build(key, [&](const fs::path& out) {
    ++builds;
    write_numbered_shards(out, 3);
  });
  CHECK_FALSE(rebuilt.hit);
  CHECK(builds == 1);
  CHECK(cache.get_or_build(key, [](const fs::path&) { FAIL("rebuilt twice"); }).hit);

  // A file of the entry truncated or deleted since it was built: rebuilt, not handed out.
  for (const bool remove : {false, true}) {
    fs::path victim;
    for (const auto& f : fs::directory_iterator(rebuilt.dir)) {
      if (f.path().extension() == ".tar") victim = f.path();
    }
    REQUIRE_FALSE(victim.empty());
    if (remove) {
      fs::remove(victim);
    } else {
      fs::resize_file(victim, fs::file_size(victim) / 2);
    }
    builds = 0;
    const auto again = cache.get_or_build(key, [&](const fs::path& out) {
      ++builds;
      write_numbered_shards(out, 3);
    });
    CHECK_FALSE(again.hit);
    CHECK(builds == 1);
  }
}

TEST_CASE("preprocessing cache: processes or threads asking for the same entry at once build it once", "[data]") {
  const auto dir = scratch_dir("preprocess_cache_concurrent");
  const CacheKey key{"numbers", 1, "slow", "generated"};
  std::atomic<int> builds{0};
  std::vector<PreprocessCache::Entry> entries(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < entries.size(); ++i) {
    threads.emplace_back([&, i] {
      entries[i] = PreprocessCache(dir).get_or_build(key, [&](const fs::path& out) {
        ++builds;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        write_numbered_shards(out, 3);
      });
    });
  }
  for (auto& t : threads) t.join();
  CHECK(builds == 1);
  CHECK(std::count_if(entries.begin(), entries.end(), [](const auto& e) { return e.hit; }) == 3);
  for (const auto& e : entries) CHECK(e.dir == entries.front().dir);
}
