#include <catch2/catch.hpp>

#include <fstream>

#include "frugal/data/image/jpeg.hpp"
#include "frugal/data/image/transforms.hpp"
#include "frugal/data/image_folder.hpp"
#include "frugal/errors.hpp"
#include "frugal/io/safetensors.hpp"
#include "support/fixtures.hpp"
#include "support/images.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

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

namespace {

// Crop boxes of every shape a RandomResizedCrop gives, plus the edges and corners of the image.
std::vector<CropBox> region_boxes(int64_t width, int64_t height) {
  return {{width / 4, height / 4, width / 2, height / 2},         // the middle
          {0, 0, width, height},                                 // the whole image
          {0, 0, width / 3, height / 3},                         // top left corner
          {width - width / 3, height - height / 3, width / 3, height / 3},  // bottom right corner
          {width / 5 + 3, 7, width / 2 + 1, height - 9},          // tall, odd offsets
          {5, height / 3 + 1, width - 11, height / 4},           // wide and short
          {width / 2 - 17, height / 2 - 13, 35, 27},             // small, off the MCU grid
          {width - 1, height - 1, 1, 1}};                        // one pixel
}

// Where a region decode's `region` (asked for as `box`) lies in a whole decode of the same JPEG at the same scale.
torch::Tensor same_box_of_whole(const torch::Tensor& whole, const JpegSize& full, const CropBox& box, const CropBox& r) {
  const double sx = static_cast<double>(whole.size(1)) / full.width, sy = static_cast<double>(whole.size(0)) / full.height;
  const auto x0 = static_cast<int64_t>(std::floor(static_cast<double>(box.x) * sx));
  const auto y0 = static_cast<int64_t>(std::floor(static_cast<double>(box.y) * sy));
  return whole.slice(0, y0, y0 + r.height).slice(1, x0, x0 + r.width);
}

}  // namespace

TEST_CASE("region decoding gives a whole decode's pixels in the region exactly, DCT-scaled or not, colour, grey or CMYK", "[transforms][roi]") {
  const fs::path corpus = fs::path(source_dir()) / "tests" / "fuzz" / "corpus" / "jpeg";
  std::vector<std::pair<std::string, std::string>> images{{"photo 500x375 4:2:0", encode_jpeg(test_image(500, 375), 90)},
                                                          {"photo 333x517 4:2:0", encode_jpeg(test_image(333, 517, 4), 85)},
                                                          {"grey 301x211", encode_jpeg(test_image(301, 211, 5).select(2, 1).contiguous(), 90)},
                                                          {"cmyk.jpg", bytes_of(corpus / "cmyk.jpg")},
                                                          {"progressive.jpg", bytes_of(corpus / "progressive.jpg")}};
  for (const auto& [name, jpeg] : images) {
    const JpegSize full = jpeg_size(jpeg, name);
    for (const CropBox& box : region_boxes(full.width, full.height)) {
      for (const int min_side : {0, 40}) {  // whole size, and DCT-scaled where the image allows
        INFO(name << " box " << box.x << "," << box.y << " " << box.width << "x" << box.height << " min side " << min_side);
        const torch::Tensor whole = decode_jpeg(jpeg, name, min_side, min_side);
        const DecodedRegion region = decode_jpeg_region(jpeg, name, box, min_side, min_side);
        CHECK(region.scaled_width == whole.size(1));
        CHECK(region.scaled_height == whole.size(0));
        const CropBox& r = region.region;
        REQUIRE(r.x + r.width <= region.image.size(1));
        REQUIRE(r.y + r.height <= region.image.size(0));
        // The same box in the whole decode: where it starts in the image, region.image's column 0
        // is the MCU column the region decoder began at.
        const torch::Tensor ours = region.image.slice(0, r.y, r.y + r.height).slice(1, r.x, r.x + r.width);
        const torch::Tensor theirs = same_box_of_whole(whole, full, box, r);
        REQUIRE(ours.sizes() == theirs.sizes());
        // Decoded with one MCU of context on each side: every pixel equal.
        CHECK(torch::equal(ours, theirs));
      }
    }
  }
  // Truncated below the region: rows never decoded would not show it, the missing end marker does.
  const std::string jpeg = encode_jpeg(test_image(400, 300), 90);
  for (const size_t keep : {jpeg.size() - 2, jpeg.size() * 2 / 3, size_t{600}}) {
    INFO("kept " << keep << " of " << jpeg.size() << " bytes");
    CHECK_THROWS_WITH(decode_jpeg_region(jpeg.substr(0, keep), "n01/cut.jpg", {10, 10, 50, 40}), Catch::Contains("n01/cut.jpg"));
    CHECK_THROWS_AS(decode_jpeg(jpeg.substr(0, keep), "n01/cut.jpg"), DataError);  // the whole decoder agrees
  }
  CHECK_THROWS_AS(decode_jpeg_region("not a jpeg", "x.jpg", {0, 0, 1, 1}), DataError);
  CHECK_THROWS_WITH(decode_jpeg_region(jpeg, "x.jpg", {390, 0, 20, 10}), Catch::Contains("outside the 400x300 image"));
}

namespace {

// The JPEGs of the restart-marker tests: 4:2:0, 4:2:2, 4:4:4, grey, CMYK, progressive, and one
// that Pillow (libjpeg) wrote with a restart marker per MCU row.
std::vector<std::pair<std::string, std::string>> restart_test_images() {
  const fs::path corpus = fs::path(source_dir()) / "tests" / "fuzz" / "corpus" / "jpeg";
  std::vector<std::pair<std::string, std::string>> images{{"photo 500x375 4:2:0", encode_jpeg(test_image(500, 375), 90)},
                                                          {"photo 333x517 4:2:0", encode_jpeg(test_image(333, 517, 4), 85)},
                                                          {"grey 301x211", encode_jpeg(test_image(301, 211, 5).select(2, 1).contiguous(), 90)}};
  for (const char* file : {"rgb422.jpg", "rgb444.jpg", "cmyk.jpg", "progressive.jpg", "restart_rows.jpg"}) {
    images.emplace_back(file, bytes_of(corpus / file));
  }
  return images;
}

}  // namespace

TEST_CASE("restart markers: a lossless rewrite, then regions cut at the markers equal a whole decode exactly", "[transforms][roi]") {
  for (const auto& [name, jpeg] : restart_test_images()) {
    const JpegSize full = jpeg_size(jpeg, name);
    for (const int interval : {1, 2, 3}) {
      const std::string rewritten = add_jpeg_restart_markers(jpeg, name, interval);
      INFO(name << ", a restart marker every " << interval << " MCUs: " << jpeg.size() << " -> " << rewritten.size() << " bytes");
      // Lossless: the same pixels, whole and DCT-scaled.
      const torch::Tensor whole = decode_jpeg(rewritten, name);
      REQUIRE(torch::equal(whole, decode_jpeg(jpeg, name)));
      CHECK(torch::equal(decode_jpeg(rewritten, name, 40, 40), decode_jpeg(jpeg, name, 40, 40)));
      std::vector<CropBox> boxes = region_boxes(full.width, full.height);
      // Edges on the MCU grid (8 and 16 pixels), where upsampling reaches into the next MCU.
      boxes.insert(boxes.end(), {{16, 16, 32, 32}, {8, 8, 40, 24}, {32, 16, 48, 32}, {0, 16, 16, 16}});
      for (const CropBox& box : boxes) {
        for (const int min_side : {0, 40}) {
          INFO("box " << box.x << "," << box.y << " " << box.width << "x" << box.height << " min side " << min_side);
          const torch::Tensor scaled_whole = min_side == 0 ? whole : decode_jpeg(rewritten, name, min_side, min_side);
          const DecodedRegion region = decode_jpeg_region(rewritten, name, box, min_side, min_side);
          CHECK(region.scaled_width == scaled_whole.size(1));
          CHECK(region.scaled_height == scaled_whole.size(0));
          const CropBox& r = region.region;
          REQUIRE(r.x + r.width <= region.image.size(1));
          REQUIRE(r.y + r.height <= region.image.size(0));
          const torch::Tensor ours = region.image.slice(0, r.y, r.y + r.height).slice(1, r.x, r.x + r.width);
          const torch::Tensor theirs = same_box_of_whole(scaled_whole, full, box, r);
          REQUIRE(ours.sizes() == theirs.sizes());
          // Cut at the markers, with the upsampling's context: every pixel equal.
          CHECK(torch::equal(ours, theirs));
        }
      }
      // The cut is what decoded (a box in the middle of a large enough image): the image holds
      // the box's whole MCU rows, where decoding without markers returns the box's rows only.
      if (interval == 1 && full.width >= 300) {
        const CropBox middle{full.width / 4, full.height / 4, full.width / 2, full.height / 2};
        const DecodedRegion cut = decode_jpeg_region(rewritten, name, middle);
        CHECK(cut.region.y > 0);
        CHECK(cut.image.size(0) > middle.height);
        CHECK(cut.image.size(0) <= middle.height + 4 * 16);
        CHECK(cut.image.size(1) <= middle.width + 4 * 16);
        CHECK(cut.image.size(0) < full.height);
        const DecodedRegion plain = decode_jpeg_region(jpeg, name, middle);  // the box's rows and one MCU above
        CHECK(plain.image.size(0) > middle.height);
        CHECK(plain.image.size(0) <= middle.height + 16);
      }
    }
  }
  // Pillow's file has its markers per MCU row: cut by rows (it was written with them, not by us).
  const std::string rows = bytes_of(fs::path(source_dir()) / "tests" / "fuzz" / "corpus" / "jpeg" / "restart_rows.jpg");
  const DecodedRegion by_rows = decode_jpeg_region(rows, "restart_rows.jpg", {30, 20, 20, 10});
  CHECK(by_rows.image.size(0) < 61);
  CHECK(by_rows.image.size(1) == 97);  // whole rows: the intervals span them

  // Damage: a file truncated below the region, or one missing a marker, is not cut silently wrong.
  const std::string rewritten = add_jpeg_restart_markers(encode_jpeg(test_image(400, 300), 90), "n01/cut.jpg");
  for (const size_t keep : {rewritten.size() - 2, rewritten.size() * 2 / 3}) {
    INFO("kept " << keep << " of " << rewritten.size() << " bytes");
    CHECK_THROWS_WITH(decode_jpeg_region(rewritten.substr(0, keep), "n01/cut.jpg", {10, 10, 50, 40}), Catch::Contains("n01/cut.jpg"));
  }
  std::string missing = rewritten;
  const size_t third = missing.find("\xFF\xD2", missing.find("\xFF\xDA"));  // the third restart marker
  REQUIRE(third != std::string::npos);
  missing.erase(third, 2);
  const CropBox box{200, 150, 100, 100};
  const DecodedRegion damaged = decode_jpeg_region(missing, "n01/missing.jpg", box);
  CHECK(damaged.image.size(0) <= box.height + 16);  // not cut: the intervals no longer add up, decoded as without markers
  const torch::Tensor ours = damaged.image.slice(0, damaged.region.y, damaged.region.y + box.height)
                                 .slice(1, damaged.region.x, damaged.region.x + box.width);
  CHECK(torch::equal(ours, same_box_of_whole(decode_jpeg(missing, "x.jpg"), {400, 300, false}, box, damaged.region)));

  // Refusals name the file; a corrupt JPEG is not rewritten into a "repaired" one.
  CHECK_THROWS_WITH(add_jpeg_restart_markers("not a jpeg", "n01/bad.jpg"), Catch::Contains("n01/bad.jpg"));
  const std::string plain = encode_jpeg(test_image(400, 300), 90);
  CHECK_THROWS_WITH(add_jpeg_restart_markers(plain.substr(0, plain.size() / 2), "n01/half.jpg"),
                    Catch::Contains("n01/half.jpg") && Catch::Contains("corrupt JPEG"));
  CHECK_THROWS_WITH(add_jpeg_restart_markers(plain, "x.jpg", 0), Catch::Contains("mcus_per_interval"));
}

TEST_CASE("training crops decoded by region equal the whole-image path and torchvision's resized_crop, per box shape", "[transforms][roi][python]") {
  const fs::path dir = scratch_dir("transforms_roi");
  const std::vector<std::pair<int64_t, int64_t>> sizes{{500, 375}, {375, 500}, {1024, 683}};
  std::vector<std::string> jpegs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    jpegs.push_back(encode_jpeg(test_image(sizes[k].first, sizes[k].second, k + 11), 90));
    std::ofstream(dir / c10::str("image", k, ".jpg"), std::ios::binary) << jpegs.back();
  }
  // torchvision's resized_crop on Pillow's decode, for every box shape of every image.
  std::vector<torch::Tensor> rows;
  std::vector<std::tuple<size_t, CropBox, int64_t>> cases;
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (const CropBox& box : region_boxes(sizes[k].first, sizes[k].second)) {
      if (box.width < 8 || box.height < 8) continue;
      for (const int64_t out : {224, 64}) {
        cases.emplace_back(k, box, out);
        rows.push_back(torch::tensor({static_cast<int64_t>(k), box.x, box.y, box.width, box.height, out}));
      }
    }
  }
  write_safetensors(dir / "boxes.safetensors", {{"boxes", torch::stack(rows)}});
  run_python_reference("pillow_resize.py", "jpeg_crops " + dir.string());
  const auto reference = read_safetensors(dir / "torchvision.safetensors");
  double worst_exact = 0.0, worst_scaled_vs_whole = 0.0, worst_scaled_vs_torchvision = 0.0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [k, box, out] = cases[i];
    INFO("image " << k << " box " << box.x << "," << box.y << " " << box.width << "x" << box.height << " -> " << out);
    const std::string& jpeg = jpegs[k];
    const torch::Tensor theirs = reference.at(c10::str("out", i));
    // Every pixel decoded (no DCT scaling): the region path against torchvision.
    const DecodedRegion exact = decode_jpeg_region(jpeg, "x.jpg", box);
    const torch::Tensor exact_out = crop_resize(exact.image, exact.region, out, out);
    REQUIRE(exact_out.sizes() == theirs.sizes());
    worst_exact = std::max(worst_exact, mean_abs_difference(exact_out, theirs));
    CHECK(mean_abs_difference(exact_out, theirs) < 0.6);
    // DCT-scaled as training decodes it: the region path against the whole-image path (same
    // scale), and against torchvision.
    const int min_w = static_cast<int>((sizes[k].first * out + box.width - 1) / box.width);
    const int min_h = static_cast<int>((sizes[k].second * out + box.height - 1) / box.height);
    const DecodedRegion scaled = decode_jpeg_region(jpeg, "x.jpg", box, min_w, min_h);
    const torch::Tensor scaled_out = crop_resize(scaled.image, scaled.region, out, out);
    const torch::Tensor whole = decode_jpeg(jpeg, "x.jpg", min_w, min_h);
    const double wx = static_cast<double>(whole.size(1)) / static_cast<double>(sizes[k].first);
    const double wy = static_cast<double>(whole.size(0)) / static_cast<double>(sizes[k].second);
    const auto x0 = static_cast<int64_t>(std::floor(static_cast<double>(box.x) * wx));
    const auto y0 = static_cast<int64_t>(std::floor(static_cast<double>(box.y) * wy));
    const torch::Tensor whole_out = crop_resize(whole, {x0, y0, scaled.region.width, scaled.region.height}, out, out);
    worst_scaled_vs_whole = std::max(worst_scaled_vs_whole, mean_abs_difference(scaled_out, whole_out));
    worst_scaled_vs_torchvision = std::max(worst_scaled_vs_torchvision, mean_abs_difference(scaled_out, theirs));
    CHECK(mean_abs_difference(scaled_out, whole_out) < 0.6);
    CHECK(mean_abs_difference(scaled_out, theirs) < 4.0);  // DCT scaling's own difference, as the whole-image path has
  }
  WARN("mean grey-level difference, worst box: region (full size) vs torchvision " << worst_exact << ", region vs whole (DCT-scaled) "
                                                                                 << worst_scaled_vs_whole << ", region (DCT-scaled) vs torchvision "
                                                                                 << worst_scaled_vs_torchvision);
  // decode_and_transform: the same crops, flips and sizes with and without region decoding.
  for (uint64_t seed = 0; seed < 30; ++seed) {
    INFO("seed " << seed);
    const auto train = ImageTransformOptions().size(112).train(true);
    const torch::Tensor roi = decode_and_transform(jpegs[2], "x.jpg", train, seed);
    const torch::Tensor whole = decode_and_transform(jpegs[2], "x.jpg", ImageTransformOptions(train).roi_decode(false), seed);
    REQUIRE(roi.sizes() == whole.sizes());
    CHECK(mean_abs_difference(roi, whole) < 0.6);
  }
}

TEST_CASE("validation is torchvision-exact by default, DCT scaling and region decoding only when asked for", "[transforms][roi]") {
  const std::string jpeg = encode_jpeg(test_image(512, 600), 90);
  const auto val = ImageTransformOptions().size(224).train(false);
  CHECK_FALSE(val.uses_dct_scaling());
  CHECK(ImageTransformOptions().train(true).uses_dct_scaling());
  const torch::Tensor exact = decode_and_transform(jpeg, "x.jpg", ImageTransformOptions(val).dct_scaling(false), 0);
  CHECK(torch::equal(decode_and_transform(jpeg, "x.jpg", val, 0), exact));
  CHECK(torch::equal(decode_and_transform(jpeg, "x.jpg", ImageTransformOptions(val).roi_decode(false), 0), exact));
  // The fast validation path: the centre crop's box decoded at a reduced size.
  const torch::Tensor fast = decode_and_transform(jpeg, "x.jpg", ImageTransformOptions(val).dct_scaling(true), 0);
  const torch::Tensor fast_whole = decode_and_transform(jpeg, "x.jpg", ImageTransformOptions(val).dct_scaling(true).roi_decode(false), 0);
  REQUIRE(fast.sizes() == exact.sizes());
  CHECK(mean_abs_difference(fast, fast_whole) < 0.6);
  CHECK(mean_abs_difference(fast, exact) < 4.0);
}
