// libFuzzer target: a safetensors file's header and every tensor it lists. Seeds:
// tests/fuzz/corpus/safetensors.
#include "frugal/io/safetensors.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = frugal::fuzz::as_file(frugal::fuzz::bytes_of(data, size), ".safetensors");
  return frugal::fuzz::expect_frugal_errors([&] { frugal::read_safetensors(file); });
}
