#include <catch2/catch.hpp>

#include <fstream>

#include "frugal/data/image/jpeg.hpp"
#include "frugal/data/image/transforms.hpp"
#include "frugal/data/image_folder.hpp"
#include "frugal/errors.hpp"
#include "frugal/io/safetensors.hpp"
#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

// A photo-like test image: smooth gradients and waves plus fine noise, uint8 [H, W, 3].
torch::Tensor test_image(int64_t width, int64_t height, uint64_t seed = 1) {
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  const torch::Tensor y = torch::linspace(0, 1, height).view({height, 1, 1});
  const torch::Tensor x = torch::linspace(0, 1, width).view({1, width, 1});
  const torch::Tensor phase = torch::tensor({0.0, 2.0, 4.0}).view({1, 1, 3});
  torch::Tensor image = 128 + 60 * torch::sin(9 * x + 5 * y + phase) + 40 * torch::cos(23 * x * y + phase) +
                        8 * torch::randn({height, width, 3}, gen);
  return image.clamp(0, 255).round().to(torch::kUInt8);
}

double mean_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().mean().item<double>();
}

double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<double>();
}

void write_bytes(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("RandomResizedCrop boxes follow torchvision's rule: area, aspect ratio, inside the image, fallback", "[transforms]") {
  std::mt19937_64 rng(3);
  double smallest = 1.0, largest = 0.0;
  for (int i = 0; i < 2000; ++i) {
    const CropBox box = random_resized_crop_box(500, 375, rng);
    REQUIRE(box.x >= 0);
    REQUIRE(box.y >= 0);
    REQUIRE(box.x + box.width <= 500);
    REQUIRE(box.y + box.height <= 375);
    const double area = static_cast<double>(box.width * box.height) / (500.0 * 375.0);
    const double ratio = static_cast<double>(box.width) / static_cast<double>(box.height);
    if (box.width == 500 && box.height == 375) continue;  // the fallback (ratio 4/3 fits)
    CHECK(area >= 0.08 * 0.95);
    CHECK(ratio >= 0.75 * 0.95);
    CHECK(ratio <= 4.0 / 3.0 * 1.05);
    smallest = std::min(smallest, area);
    largest = std::max(largest, area);
  }
  CHECK(smallest < 0.1);  // the whole scale range is used
  CHECK(largest > 0.9);
  // An image too elongated for any allowed ratio falls back to a centred crop of ratio 4/3 or 3/4.
  const CropBox wide = random_resized_crop_box(1000, 50, rng, 0.9, 1.0);
  CHECK(wide.height == 50);
  CHECK(wide.width == 67);
  CHECK(wide.x == (1000 - 67) / 2);
  const CropBox tall = random_resized_crop_box(30, 900, rng, 0.9, 1.0);
  CHECK(tall.width == 30);
  CHECK(tall.height == 40);
  // Deterministic for a seed.
  std::mt19937_64 a(11), b(11);
  const CropBox first = random_resized_crop_box(640, 480, a), again = random_resized_crop_box(640, 480, b);
  CHECK(std::tie(first.x, first.y, first.width, first.height) == std::tie(again.x, again.y, again.width, again.height));
}

TEST_CASE("the validation transform is torchvision's Resize(256) + CenterCrop(224), box arithmetic and all", "[transforms]") {
  const ResizeCenterCrop landscape = resize_center_crop(500, 375, 256, 224);
  CHECK(landscape.resized_width == 341);  // int(256 * 500 / 375)
  CHECK(landscape.resized_height == 256);
  CHECK(landscape.crop.x == 58);  // round(58.5) = 58: Python rounds half to even
  CHECK(landscape.crop.y == 16);
  CHECK((landscape.crop.width == 224 && landscape.crop.height == 224));
  const ResizeCenterCrop portrait = resize_center_crop(333, 500, 256, 224);
  CHECK(portrait.resized_width == 256);
  CHECK(portrait.resized_height == 384);  // int(384.38...)
  CHECK(portrait.crop.x == 16);
  CHECK(portrait.crop.y == 80);
  CHECK(resize_center_crop(375, 500, 256, 224).crop.y == 58);  // 341: the same half-way case, on y
  CHECK(resize_center_crop(1000, 257, 256, 224).crop.x == 386);  // int(995.9) = 995, round(385.5) = 386
}

TEST_CASE("validation images equal torchvision's Resize(256) + CenterCrop(224) on Pillow's decode", "[transforms][python]") {
  const fs::path dir = scratch_dir("transforms_eval");
  const std::vector<std::pair<int64_t, int64_t>> sizes{{500, 375}, {375, 500}, {333, 257}, {1000, 257}, {256, 256}, {231, 300}};
  std::vector<std::string> names;
  for (size_t k = 0; k < sizes.size(); ++k) {
    names.push_back((dir / c10::str("image", k, ".jpg")).string());
    std::ofstream(names.back(), std::ios::binary) << encode_jpeg(test_image(sizes[k].first, sizes[k].second, k + 3), 90);
  }
  run_python_reference("pillow_resize.py", "eval " + dir.string() + " " + std::to_string(sizes.size()));
  const auto reference = read_safetensors(dir / "torchvision.safetensors");
  const auto val = ImageTransformOptions().size(224).train(false).dct_scaling(false);
  for (size_t k = 0; k < sizes.size(); ++k) {
    INFO(sizes[k].first << "x" << sizes[k].second);
    std::ifstream in(names[k], std::ios::binary);
    const std::string jpeg{std::istreambuf_iterator<char>(in), {}};
    const torch::Tensor ours = decode_and_transform(jpeg, names[k], val, 0);
    const torch::Tensor theirs = reference.at("out" + std::to_string(k));
    REQUIRE(ours.sizes() == theirs.sizes());
    // The same box and the same decode: only the two resizers' fixed-point rounding differs (a
    // crop box one pixel off would give several grey levels).
    CHECK(mean_abs_difference(ours, theirs) < 0.6);
    CHECK(max_abs_difference(ours, theirs) <= 3);
  }
}

TEST_CASE("crop + resize matches Pillow's BILINEAR resize, flips mirror, normalisation matches torchvision", "[transforms][python]") {
  const fs::path dir = scratch_dir("transforms_pillow");
  const torch::Tensor image = test_image(320, 240);
  const std::vector<std::vector<int64_t>> boxes{
      {0, 0, 320, 240, 224, 224}, {10, 20, 200, 150, 64, 64}, {100, 50, 60, 90, 112, 112}, {5, 5, 300, 200, 48, 32}};
  std::vector<torch::Tensor> rows;
  for (const auto& b : boxes) rows.push_back(torch::tensor(b));
  write_safetensors(dir / "input.safetensors", {{"image", image}, {"boxes", torch::stack(rows)}});
  run_python_reference("pillow_resize.py", "resize " + dir.string());
  const auto pillow = read_safetensors(dir / "pillow.safetensors");
  for (size_t k = 0; k < boxes.size(); ++k) {
    const auto& b = boxes[k];
    INFO("box " << k);
    const torch::Tensor ours = crop_resize(image, {b[0], b[1], b[2], b[3]}, b[4], b[5]);
    const torch::Tensor theirs = pillow.at("out" + std::to_string(k));
    REQUIRE(ours.sizes() == theirs.sizes());
    CHECK(mean_abs_difference(ours, theirs) < 0.6);  // rounding of two fixed-point implementations
    CHECK(max_abs_difference(ours, theirs) <= 3);
  }
  // Flip: column x becomes column W-1-x.
  const torch::Tensor flipped = horizontal_flip(image);
  CHECK(torch::equal(flipped.select(1, 0), image.select(1, 319)));
  CHECK(torch::equal(flipped.select(1, 100), image.select(1, 219)));
  // Normalisation: (x / 255 - mean) / std per channel, in the requested memory format.
  const torch::Tensor batch = image.permute({2, 0, 1}).unsqueeze(0);
  const torch::Tensor normalised = normalize_images(batch, torch::MemoryFormat::ChannelsLast);
  CHECK(normalised.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const torch::Tensor expected = (batch.to(torch::kFloat32) / 255 - torch::tensor({0.485, 0.456, 0.406}).view({1, 3, 1, 1})) /
                                 torch::tensor({0.229, 0.224, 0.225}).view({1, 3, 1, 1});
  CHECK(torch::allclose(normalised, expected, 1e-5, 1e-5));
}

TEST_CASE("decode_and_transform: DCT-scaled decoding stays close to a full decode, flips by seed, names corrupt files", "[transforms]") {
  const std::string jpeg = encode_jpeg(test_image(1024, 768), 92);
  int flipped = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const auto train = ImageTransformOptions().size(112).train(true);
    const torch::Tensor fast = decode_and_transform(jpeg, "x.jpg", train, seed);
    const torch::Tensor full = decode_and_transform(jpeg, "x.jpg", ImageTransformOptions(train).dct_scaling(false), seed);
    const torch::Tensor unflipped = decode_and_transform(jpeg, "x.jpg", ImageTransformOptions(train).dct_scaling(false).flip(false), seed);
    REQUIRE(fast.sizes() == torch::IntArrayRef({3, 112, 112}));
    INFO("seed " << seed);
    CHECK(mean_abs_difference(fast, full) < 4.0);  // the same crop, at most half a source pixel apart
    if (torch::equal(full, unflipped)) continue;
    CHECK(torch::equal(full, unflipped.flip({2})));
    ++flipped;
  }
  CHECK(flipped > 8);
  CHECK(flipped < 32);
  // Validation: deterministic, no flip, DCT scaling of a large image.
  const auto val = ImageTransformOptions().size(64).train(false);
  CHECK(torch::equal(decode_and_transform(jpeg, "x.jpg", val, 1), decode_and_transform(jpeg, "x.jpg", val, 2)));
  CHECK(mean_abs_difference(decode_and_transform(jpeg, "x.jpg", val, 1),
                            decode_and_transform(jpeg, "x.jpg", ImageTransformOptions(val).dct_scaling(false), 1)) < 4.0);
  // A truncated JPEG names its file.
  CHECK_THROWS_WITH(decode_and_transform(jpeg.substr(0, jpeg.size() / 3), "n01/broken.jpg", val, 0),
                    Catch::Contains("n01/broken.jpg"));
  CHECK_THROWS_AS(decode_and_transform("not a jpeg at all", "text.jpg", val, 0), DataError);
  CHECK_THROWS_AS(ImageTransformOptions().min_scale(0).validate(), OptionError);
}

TEST_CASE("ImageFolderDataset: torchvision's order, labels, and corrupt images as errors or counted skips", "[transforms][python]") {
  const fs::path root = scratch_dir("image_folder");
  const std::string good = encode_jpeg(test_image(80, 60), 90);
  for (const char* file : {"b_dog/2.jpg", "b_dog/1.JPEG", "a_cat/x.jpg", "a_cat/sub/y.jpg", "c_owl/z.jpeg"}) {
    write_bytes(root / file, good);
  }
  write_bytes(root / "c_owl/broken.jpg", good.substr(0, 200));
  write_bytes(root / "a_cat/notes.txt", "not an image");
  auto decode = [](const Sample& s, const SampleContext& c) {
    return Batch{decode_and_transform(s.field("jpg"), s.key, ImageTransformOptions().size(32), c.sample_seed()),
                 torch::tensor(static_cast<int64_t>(std::stoll(s.field("cls")))), {}};
  };
  ImageFolderDataset strict(root, decode);
  REQUIRE(strict.size() == 6);
  const auto reference = run_python_reference("pillow_resize.py", "imagefolder " + root.string());
  CHECK(reference["classes"].get<std::vector<std::string>>() == strict.classes());
  for (int64_t i = 0; i < strict.size(); ++i) {
    const auto& expected = reference["samples"][static_cast<size_t>(i)];
    const Sample s = strict.read_sample(i);
    CHECK((root / s.key).string() == expected[0].get<std::string>());
    CHECK(std::stoll(s.field("cls")) == expected[1].get<int64_t>());
  }
  const int64_t broken = 4;  // c_owl/broken.jpg sorts before c_owl/z.jpeg
  REQUIRE(strict.read_sample(broken).key == "c_owl/broken.jpg");
  CHECK_THROWS_WITH(strict.get_batch({0, broken}), Catch::Contains("c_owl/broken.jpg"));
  ImageFolderDataset skipping(root, decode, OnCorrupt::skip);
  const Batch batch = skipping.get_batch({0, 1, broken, 5});
  CHECK(batch.size() == 3);
  CHECK(skipping.samples_skipped() == 1);
  CHECK(batch.input.sizes() == torch::IntArrayRef({3, 3, 32, 32}));
  CHECK_THROWS_AS(ImageFolderDataset(root / "missing", decode), DataError);
}
