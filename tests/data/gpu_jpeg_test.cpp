// JPEG decoding on the GPU with nvJPEG: the same pixels as libjpeg-turbo's (up to the IDCTs), the
// same crops as the CPU path, batched and one by one, the CPU fallback for what nvJPEG refuses,
// corrupt images named by shard and offset, and batches ordered on the consumer's stream.
#include <catch2/catch.hpp>

#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <fstream>
#include <iostream>
#include <numeric>

#include "support/fixtures.hpp"
#include "support/images.hpp"
#include "support/source_dir.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

std::string corpus(const std::string& name) {
  return bytes_of(fs::path(source_dir()) / "tests" / "fuzz" / "corpus" / "jpeg" / name);
}

bool skip_without_gpu_decoding() {
  std::string why;
  if (gpu_jpeg_available(&why)) return false;
  std::cout << "SKIPPED: GPU JPEG decoding is unavailable here (" << why << ")\n";
  return true;
}

// Shards of photos (and the corpus' progressive and CMYK JPEGs), one of them optionally truncated.
void write_photo_shards(const fs::path& dir, int64_t n, int64_t truncated = -1) {
  ShardWriter writer(dir, ShardWriterOptions().target_bytes(int64_t{1} << 20));
  for (int64_t i = 0; i < n; ++i) {
    std::string jpeg = i == 3 ? corpus("progressive.jpg") : i == 5 ? corpus("cmyk.jpg") : encode_jpeg(test_image(320 + 8 * i, 240 + 4 * i, i), 90);
    if (i == truncated) jpeg = jpeg.substr(0, jpeg.size() / 2);
    writer.write({c10::str("s", 100000 + i), {{"jpg", jpeg}, {"cls", std::to_string(i % 7)}}});
  }
  writer.finish();
}

SampleDecoder cpu_decoder(const ImageTransformOptions& transform) {
  return [transform](const Sample& s, const SampleContext& c) {
    return Batch{decode_and_transform(s.field("jpg"), s.key, transform, c.sample_seed()), torch::tensor(static_cast<int64_t>(std::stoll(s.field("cls")))), {}};
  };
}

}  // namespace

TEST_CASE("without a GPU or libnvjpeg, GPU decoding says why and is refused where it was asked for", "[data]") {
  std::string why;
  if (gpu_jpeg_available(&why)) {
    std::cout << "SKIPPED: GPU decoding is available here (the test is for machines without it)\n";
    return;
  }
  CHECK_FALSE(why.empty());
  const fs::path dir = scratch_dir("gpu_jpeg_unavailable");
  write_photo_shards(dir, 2);
  auto raw = std::make_shared<ShardedDataset>(dir, raw_samples());
  CHECK_THROWS_WITH(GpuImageDataset(raw, ImageTransformOptions(), torch::Device("cuda:0")),
                    Catch::Contains("images.decode") || Catch::Contains("CUDA"));
  CHECK_THROWS_WITH(GpuJpegDecoder(0), Catch::Contains("unavailable") && Catch::Contains(why));
  CHECK_THROWS_WITH(raw->get_batch({0}), Catch::Contains("read raw"));
}

TEST_CASE("nvJPEG decodes as libjpeg-turbo does, batched and one by one, with the CPU for what it refuses", "[data][gpu]") {
  if (skip_without_gpu_decoding()) return;
  std::vector<std::string> jpegs{encode_jpeg(test_image(500, 375, 1), 90), encode_jpeg(test_image(333, 517, 2), 85),
                                 encode_jpeg(test_image(301, 211, 3).select(2, 0).contiguous(), 90), corpus("progressive.jpg"),
                                 corpus("cmyk.jpg"), corpus("rgb.jpg"),
                                 // as frugal-data convert stores them: a restart marker per MCU, and per row
                                 add_jpeg_restart_markers(encode_jpeg(test_image(500, 375, 4), 90), "restart.jpg"),
                                 corpus("restart_rows.jpg")};
  std::vector<std::string_view> views(jpegs.begin(), jpegs.end());
  std::vector<std::string> names;
  for (size_t i = 0; i < jpegs.size(); ++i) names.push_back(c10::str("image", i, ".jpg"));
  for (const bool batched : {true, false}) {
    INFO((batched ? "batched" : "one by one"));
    GpuJpegDecoder decoder(0, GpuJpegOptions().batched(batched));
    const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, 0);
    const auto images = decoder.decode(views, names, stream.stream());
    stream.synchronize();
    REQUIRE(images.size() == jpegs.size());
    for (size_t i = 0; i < jpegs.size(); ++i) {
      INFO(names[i]);
      const torch::Tensor cpu = decode_jpeg(jpegs[i], names[i]);
      REQUIRE(images[i].is_cuda());
      REQUIRE(images[i].sizes() == cpu.sizes());
      CHECK(mean_abs_difference(images[i], cpu) <= 2.0);  // the two IDCTs and upsamplers differ slightly
    }
    CHECK(decoder.counts().cpu >= 1);  // the CMYK JPEG, at least
    CHECK(decoder.counts().hardware + decoder.counts().gpu + decoder.counts().cpu == static_cast<int64_t>(jpegs.size()));
    WARN("hardware engines: " << decoder.uses_hardware() << ", decoded by them " << decoder.counts().hardware << ", CUDA "
                              << decoder.counts().gpu << ", CPU " << decoder.counts().cpu);
  }
}

TEST_CASE("GPU batches equal the CPU path's crops, a corrupt JPEG is named by shard and offset, skips are counted", "[data][gpu]") {
  if (skip_without_gpu_decoding()) return;
  const fs::path dir = scratch_dir("gpu_jpeg_shards");
  write_photo_shards(dir, 12);
  const torch::Device cuda("cuda:0");
  for (const bool train : {true, false}) {
    INFO((train ? "training" : "validation"));
    // The CPU reference decodes every pixel (the GPU has no DCT scaling).
    const auto transform = ImageTransformOptions().size(96).train(train).dct_scaling(false);
    auto cpu = std::make_shared<ShardedDataset>(dir, cpu_decoder(transform));
    auto gpu = std::make_shared<GpuImageDataset>(std::make_shared<ShardedDataset>(dir, raw_samples()), transform, cuda);
    const FetchContext context{2, 7, nullptr, false};
    std::vector<int64_t> indices(12);
    std::iota(indices.begin(), indices.end(), int64_t{0});
    const Batch expected = cpu->fetch(indices, context), got = gpu->fetch(indices, context);
    REQUIRE(got.input.is_cuda());
    REQUIRE(got.input.sizes() == expected.input.sizes());
    CHECK(got.input.is_contiguous(torch::MemoryFormat::ChannelsLast));
    CHECK(torch::equal(got.target.cpu(), expected.target));
    for (int64_t i = 0; i < 12; ++i) {
      INFO("image " << i);
      CHECK(mean_abs_difference(got.input[i], expected.input[i]) <= 2.0);
    }
    // Through a loader whose workers hand batches over on their side streams.
    DataLoader loader(gpu, DataLoaderOptions().batch_size(4).num_workers(2).shuffle(false));
    loader.copy_ahead_to(cuda);
    DataLoader reference(cpu, DataLoaderOptions().batch_size(4).shuffle(false));
    while (auto b = loader.next()) {
      const auto r = reference.next();
      REQUIRE(r.has_value());
      const torch::Tensor used = (b->input.to(torch::kFloat32) + 0).cpu();  // used at once on the main stream
      CHECK(mean_abs_difference(used, r->input) <= 2.0);
    }
  }
  // A truncated JPEG inside a batch: the CPU path's error, with the shard and the sample's offset.
  const fs::path bad_dir = scratch_dir("gpu_jpeg_corrupt");
  write_photo_shards(bad_dir, 8, /*truncated=*/6);
  auto raw = std::make_shared<ShardedDataset>(bad_dir, raw_samples());
  GpuImageDataset strict(raw, ImageTransformOptions().size(64), cuda);
  const auto [shard, offset] = raw->location(6);
  try {
    strict.get_batch({4, 5, 6, 7});
    FAIL("a truncated JPEG was decoded");
  } catch (const DataError& e) {
    CHECK(e.file() == shard.string());
    CHECK(e.offset() == offset);
    CHECK_THAT(e.what(), Catch::Contains("s100006"));
  }
  auto lenient_raw = std::make_shared<ShardedDataset>(bad_dir, raw_samples(), ShardedDatasetOptions().on_corrupt(OnCorrupt::skip));
  GpuImageDataset lenient(lenient_raw, ImageTransformOptions().size(64), cuda);
  const Batch batch = lenient.get_batch({4, 5, 6, 7});
  CHECK(batch.size() == 3);
  CHECK(lenient_raw->samples_skipped() == 1);
}
