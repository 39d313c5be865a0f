// libFuzzer target: JPEG header, full decode, DCT-scaled decode and region decode (the ResNet
// loader's paths; a JPEG with restart markers is cut at them), and the lossless rewrite with
// restart markers, whose output is decoded by region again. Seeds: tests/fuzz/corpus/jpeg.
#include "frugal/data/image/jpeg.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = frugal::fuzz::bytes_of(data, size);
  frugal::fuzz::expect_frugal_errors([&] { frugal::jpeg_size(bytes, "fuzz.jpg"); });
  frugal::fuzz::expect_frugal_errors([&] { frugal::decode_jpeg(bytes, "fuzz.jpg", 64, 64); });
  frugal::fuzz::expect_frugal_errors([&] {
    // The middle of the image, as a training crop takes it, at full size and DCT-scaled.
    const frugal::JpegSize full = frugal::jpeg_size(bytes, "fuzz.jpg");
    if (full.width < 1 || full.height < 1) return;
    const frugal::CropBox middle{full.width / 4, full.height / 3, std::max(1, full.width / 2), std::max(1, full.height / 2)};
    frugal::decode_jpeg_region(bytes, "fuzz.jpg", middle);
    frugal::decode_jpeg_region(bytes, "fuzz.jpg", middle, 16, 16);
    const std::string rewritten = frugal::add_jpeg_restart_markers(bytes, "fuzz.jpg", 1 + static_cast<int>(size % 3));
    frugal::decode_jpeg_region(rewritten, "rewritten.jpg", middle);
    frugal::decode_jpeg_region(rewritten, "rewritten.jpg", middle, 16, 16);
  });
  return frugal::fuzz::expect_frugal_errors([&] { frugal::decode_jpeg(bytes, "fuzz.jpg"); });
}
