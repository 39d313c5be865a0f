// libFuzzer target: .npy arrays as shards carry them. Seeds: tests/fuzz/corpus/npy.
#include "frugal/data/npy.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return frugal::fuzz::expect_frugal_errors([&] { frugal::decode_npy(frugal::fuzz::bytes_of(data, size), "fuzz.npy"); });
}
