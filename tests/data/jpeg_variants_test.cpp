// JPEGs as other encoders write them, through every JPEG path of the data pipeline: any sampling
// factors libjpeg-turbo's cjpeg writes (3x1, 4:1:0, mixed...), progressive, fill bytes before
// markers. Each decodes as libjpeg-turbo's own djpeg decodes it, whole and by region (exactly,
// with or without restart markers), is rewritten with markers losslessly and is accepted by the
// converter. What libjpeg-turbo refuses (lossless SOF3) is refused naming the file and the reason.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "frugal/data/image/jpeg.hpp"
#include "support/fixtures.hpp"
#include "support/images.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

bool have(const char* tool) { return std::system((std::string("command -v ") + tool + " > /dev/null 2>&1").c_str()) == 0; }

void write_bytes(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
}

void write_ppm(const fs::path& file, const torch::Tensor& rgb) {
  std::ostringstream out;
  out << "P6\n" << rgb.size(1) << " " << rgb.size(0) << "\n255\n";
  const torch::Tensor c = rgb.contiguous();
  out.write(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), static_cast<std::streamsize>(c.numel()));
  write_bytes(file, out.str());
}

// A binary PPM (P6) as uint8 [H, W, 3].
torch::Tensor read_ppm(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string magic;
  int64_t width = 0, height = 0, max = 0;
  in >> magic >> width >> height >> max;
  in.get();
  REQUIRE(magic == "P6");
  torch::Tensor out = torch::empty({height, width, 3}, torch::kUInt8);
  in.read(reinterpret_cast<char*>(out.data_ptr<uint8_t>()), static_cast<std::streamsize>(out.numel()));
  REQUIRE(in.good());
  return out;
}

// `command`'s output file, or fails the test with what it printed.
std::string run_tool(const std::string& command, const fs::path& output) {
  const int rc = std::system((command + " 2> " + output.string() + ".err").c_str());
  INFO(command << ": " << bytes_of(output.string() + ".err"));
  REQUIRE(rc == 0);
  return bytes_of(output);
}

// Boxes of every kind: the whole image, edges, odd offsets, one-pixel boxes on a grid.
std::vector<CropBox> boxes_of(int64_t width, int64_t height, uint64_t seed) {
  std::vector<CropBox> boxes{{0, 0, width, height}, {width / 4, height / 4, width / 2, height / 2}, {width - 1, height - 1, 1, 1},
                             {0, height / 3, width / 3, 5}, {width / 2 - 7, 3, 13, height - 6}};
  for (int64_t y = 0; y < height; y += 7) {
    for (int64_t x = 0; x < width; x += 11) boxes.push_back({x, y, 1, 1});
  }
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 60; ++i) {
    const int64_t w = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(width)), h = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(height));
    boxes.push_back({static_cast<int64_t>(rng() % static_cast<uint64_t>(width - w + 1)), static_cast<int64_t>(rng() % static_cast<uint64_t>(height - h + 1)), w, h});
  }
  return boxes;
}

// Every box of `jpeg`, decoded by region (at full size and DCT-scaled), equals that box of the
// whole decode, exactly; returns how many boxes differ.
int64_t inexact_regions(const std::string& jpeg, const std::string& name) {
  const JpegSize full = jpeg_size(jpeg, name);
  int64_t inexact = 0;
  for (const int min_side : {0, 24}) {
    const torch::Tensor whole = decode_jpeg(jpeg, name, min_side, min_side);
    for (const CropBox& box : boxes_of(full.width, full.height, static_cast<uint64_t>(jpeg.size()))) {
      const DecodedRegion region = decode_jpeg_region(jpeg, name, box, min_side, min_side);
      const CropBox& r = region.region;
      const double sx = static_cast<double>(whole.size(1)) / full.width, sy = static_cast<double>(whole.size(0)) / full.height;
      const auto x0 = static_cast<int64_t>(std::floor(static_cast<double>(box.x) * sx));
      const auto y0 = static_cast<int64_t>(std::floor(static_cast<double>(box.y) * sy));
      const torch::Tensor theirs = whole.slice(0, y0, y0 + r.height).slice(1, x0, x0 + r.width);
      const torch::Tensor ours = region.image.slice(0, r.y, r.y + r.height).slice(1, r.x, r.x + r.width);
      if (!ours.sizes().equals(theirs.sizes()) || !torch::equal(ours, theirs)) {
        if (inexact == 0) {
          UNSCOPED_INFO(name << " min side " << min_side << ": box " << box.x << "," << box.y << " " << box.width << "x" << box.height
                             << " differs by up to " << (ours.sizes().equals(theirs.sizes()) ? max_abs_difference(ours, theirs) : -1.0));
        }
        ++inexact;
      }
    }
  }
  return inexact;
}

}  // namespace

TEST_CASE("JPEGs of any sampling factors, progressive or with fill bytes decode as djpeg does, whole, by region exactly, rewritten and converted",
          "[data][jpeg]") {
  if (!have("cjpeg") || !have("djpeg")) {
    std::cout << "SKIPPED: no cjpeg/djpeg on this machine (Debian's libjpeg-turbo-progs; bash scripts/install-deps.sh installs it)\n";
    return;
  }
  const fs::path dir = scratch_dir("jpeg_variants");
  write_ppm(dir / "photo.ppm", test_image(131, 97, 3));
  std::vector<std::pair<std::string, std::string>> jpegs;
  for (const char* sampling : {"2x2,1x1,1x1", "3x1,1x1,1x1", "4x1,1x1,1x1", "4x2,1x1,1x1", "1x2,1x1,1x1", "2x1,1x2,1x1",
                               "2x2,2x1,1x1", "1x1,2x2,1x1", "3x2,1x1,1x1", "1x4,1x1,1x1"}) {
    const fs::path out = dir / (std::string("sample_") + sampling + ".jpg");
    jpegs.emplace_back(std::string("cjpeg -sample ") + sampling,
                       run_tool("cjpeg -quality 90 -sample " + std::string(sampling) + " -outfile '" + out.string() + "' " + (dir / "photo.ppm").string(), out));
  }
  jpegs.emplace_back("cjpeg -progressive", run_tool("cjpeg -progressive -outfile " + (dir / "prog.jpg").string() + " " + (dir / "photo.ppm").string(), dir / "prog.jpg"));
  jpegs.emplace_back("cjpeg -restart 1 (a marker per MCU row)",
                     run_tool("cjpeg -restart 1 -outfile " + (dir / "rows.jpg").string() + " " + (dir / "photo.ppm").string(), dir / "rows.jpg"));
  // Fill bytes (0xFF) before markers are legal: before the first table and before the scan.
  std::string filled = jpegs.front().second;
  filled.insert(filled.find("\xFF\xDB"), "\xFF\xFF\xFF");
  filled.insert(filled.find("\xFF\xDA"), "\xFF\xFF");
  jpegs.emplace_back("fill bytes before markers", filled);

  int index = 0;
  for (const auto& [name, jpeg] : jpegs) {
    INFO(name);
    const fs::path file = dir / "current.jpg";
    write_bytes(file, jpeg);
    const torch::Tensor reference = read_ppm([&] {
      run_tool("djpeg -dct int -ppm -outfile " + (dir / "current.ppm").string() + " " + file.string(), dir / "current.ppm");
      return dir / "current.ppm";
    }());
    const JpegSize size = jpeg_size(jpeg, name);
    CHECK(size.width == 131);
    CHECK(size.height == 97);
    CHECK(torch::equal(decode_jpeg(jpeg, name), reference));
    CHECK(inexact_regions(jpeg, name) == 0);
    const std::string rewritten = add_jpeg_restart_markers(jpeg, name);
    CHECK(rewritten.find("\xFF\xDD") != std::string::npos);
    CHECK(torch::equal(decode_jpeg(rewritten, name), reference));
    CHECK(inexact_regions(rewritten, name + ", rewritten") == 0);
    for (const int interval : {2, 3}) CHECK(inexact_regions(add_jpeg_restart_markers(jpeg, name, interval), name + ", rewritten") == 0);
    write_bytes(dir / "folder" / "a" / (std::to_string(index++) + ".jpg"), jpeg);
  }
  ShardWriter out(dir / "shards");
  const ConvertResult converted = convert_image_folder(dir / "folder", out);
  CHECK(converted.samples == static_cast<int64_t>(jpegs.size()));
  CHECK(converted.skipped.empty());
  CHECK(converted.warnings.empty());
}

TEST_CASE("what libjpeg-turbo refuses is refused naming the file and its reason: a lossless (SOF3) JPEG, a truncated one", "[data][jpeg]") {
  std::string lossless = encode_jpeg(test_image(64, 48), 90);
  const size_t sof = lossless.find("\xFF\xC0");
  REQUIRE(sof != std::string::npos);
  lossless[sof + 1] = static_cast<char>(0xC3);  // the frame now says: lossless, Huffman
  CHECK_THROWS_WITH(decode_jpeg(lossless, "n02/lossless.jpg"),
                    Catch::Contains("n02/lossless.jpg") && Catch::Contains("Unsupported JPEG process: SOF type 0xc3"));
  CHECK_THROWS_WITH(decode_jpeg_region(lossless, "n02/lossless.jpg", {0, 0, 8, 8}), Catch::Contains("SOF type 0xc3"));
  CHECK_THROWS_WITH(add_jpeg_restart_markers(lossless, "n02/lossless.jpg"), Catch::Contains("n02/lossless.jpg"));
}
