// libFuzzer target: JPEG header, full decode and DCT-scaled decode (the ResNet loader's path).
// Seeds: tests/fuzz/corpus/jpeg.
#include "frugal/data/image/jpeg.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = frugal::fuzz::bytes_of(data, size);
  frugal::fuzz::expect_frugal_errors([&] { frugal::jpeg_size(bytes, "fuzz.jpg"); });
  frugal::fuzz::expect_frugal_errors([&] { frugal::decode_jpeg(bytes, "fuzz.jpg", 64, 64); });
  return frugal::fuzz::expect_frugal_errors([&] { frugal::decode_jpeg(bytes, "fuzz.jpg"); });
}
