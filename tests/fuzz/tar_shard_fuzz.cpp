// libFuzzer target: a tar shard read front to back (ShardScanner) and indexed in both corruption
// modes, as `frugal-data verify` and the sharded loader do. Seeds: tests/fuzz/corpus/tar_shard.
#include "frugal/data/tar_shard.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = frugal::fuzz::as_file(frugal::fuzz::bytes_of(data, size), ".tar");
  frugal::fuzz::expect_frugal_errors([&] {
    frugal::ShardScanner scan(file);
    while (scan.next()) {
    }
  });
  frugal::fuzz::expect_frugal_errors([&] { frugal::build_shard_index(file, frugal::OnCorrupt::skip); });
  return frugal::fuzz::expect_frugal_errors([&] { frugal::build_shard_index(file); });
}
