#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/fixtures.hpp"
#include "support/images.hpp"
#include "support/python_reference.hpp"
#include "support/source_dir.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << text;
}

std::vector<Sample> read_all(const fs::path& dir) {
  std::vector<Sample> out;
  for (const auto& shard : list_shards(dir)) {
    ShardScanner scan(shard);
    while (auto s = scan.next()) out.push_back(*s);
  }
  return out;
}

}  // namespace

TEST_CASE("an image folder becomes shards with class indices in sorted folder order, through the loader", "[data]") {
  const auto dir = scratch_dir("convert_images");
  const std::vector<std::string> classes{"cat", "dog", "eel"};
  int64_t images = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    for (int i = 0; i < 7; ++i) {
      const auto image = torch::full({20 + i, 24, 3}, static_cast<int64_t>(40 * c + i), torch::kUInt8);
      write_text(dir / "images" / classes[c] / ("img" + std::to_string(i) + (i == 3 ? ".JPEG" : ".jpg")), encode_jpeg(image));
      ++images;
    }
  }
  write_text(dir / "images" / "dog" / "notes.txt", "not an image");
  ShardWriter out(dir / "shards", ShardWriterOptions().target_bytes(2048));
  const auto result = convert_image_folder(dir / "images", out);
  CHECK(result.samples == images);
  CHECK(result.classes == classes);
  CHECK(read_classes(dir / "shards") == classes);
  REQUIRE(result.skipped.size() == 1);
  CHECK_THAT(result.skipped[0], Catch::Contains("notes.txt"));

  // Folder → shards → loader: every image once per epoch, with its class.
  auto data = std::make_shared<ShardedDataset>(dir / "shards", [](const Sample& s, const SampleContext&) {
    const torch::Tensor image = decode_jpeg(s.field("jpg"), s.key);
    return Batch{image.to(torch::kFloat).mean().reshape({1}), torch::tensor(static_cast<int64_t>(std::stoll(s.field("cls")))), {}};
  });
  DataLoader loader(data, DataLoaderOptions().batch_size(5).num_workers(2));
  std::multiset<std::pair<int64_t, int64_t>> seen;  // (class, brightness)
  while (auto batch = loader.next()) {
    for (int64_t i = 0; i < batch->size(); ++i) {
      seen.insert({batch->target[i].item<int64_t>(), std::lround(batch->input[i][0].item<float>())});
    }
  }
  std::multiset<std::pair<int64_t, int64_t>> expected;
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < 7; ++i) expected.insert({c, 40 * c + i});
  }
  CHECK(seen == expected);

  fs::create_directories(dir / "empty" / "a");
  ShardWriter none(dir / "none");
  CHECK_THROWS_WITH(convert_image_folder(dir / "empty", none), Catch::Contains("hold no images"));
}

TEST_CASE("converted JPEGs get restart markers losslessly unless switched off, and a corrupt one is stored as it is with a warning", "[data]") {
  const auto dir = scratch_dir("convert_restart");
  const std::string photo = encode_jpeg(test_image(200, 150), 90);
  const std::string truncated = photo.substr(0, photo.size() / 2);  // a readable header, half the data
  write_text(dir / "images" / "a" / "1photo.jpg", photo);
  write_text(dir / "images" / "a" / "2truncated.jpg", truncated);
  ShardWriter out(dir / "shards");
  const auto result = convert_image_folder(dir / "images", out);
  REQUIRE(result.samples == 2);
  REQUIRE(result.warnings.size() == 1);
  CHECK_THAT(result.warnings[0], Catch::Contains("2truncated.jpg") && Catch::Contains("stored as it is"));
  const auto samples = read_all(dir / "shards");
  REQUIRE(samples.size() == 2);
  const std::string stored(samples[0].field("jpg"));
  CHECK(stored != photo);
  CHECK(stored.find("\xFF\xDD") != std::string::npos);  // the restart interval's marker
  CHECK(torch::equal(decode_jpeg(stored, "stored.jpg"), decode_jpeg(photo, "photo.jpg")));
  CHECK(std::string(samples[1].field("jpg")) == truncated);

  ShardWriter kept(dir / "kept");
  const auto as_is = convert_image_folder(dir / "images", kept, ImageFolderConvertOptions().restart_markers(false));
  CHECK(as_is.warnings.empty());
  CHECK(std::string(read_all(dir / "kept")[0].field("jpg")) == photo);
}

TEST_CASE("JSONL and SQuAD files become one JSON sample per line or question, and bad input names line or JSON path", "[data]") {
  const auto dir = scratch_dir("convert_text");
  write_text(dir / "good.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n");
  ShardWriter jsonl_out(dir / "jsonl");
  const auto jsonl = convert_jsonl(dir / "good.jsonl", jsonl_out);
  CHECK(jsonl.samples == 2);
  CHECK(jsonl.skipped.size() == 1);
  CHECK(read_all(dir / "jsonl")[1].fields.at("json") == "{\"text\": \"b\"}");

  write_text(dir / "bad.jsonl", "{\"text\": \"a\"}\n{\"text\": oops}\n");
  ShardWriter bad_out(dir / "bad");
  try {
    convert_jsonl(dir / "bad.jsonl", bad_out);
    FAIL("no error");
  } catch (const DataError& e) {
    CHECK(e.file() == (dir / "bad.jsonl").string());
    CHECK_THAT(e.what(), Catch::Contains("line 2"));
    CHECK(e.offset() >= 14);
  }

  const nlohmann::json squad{
      {"version", "1.1"},
      {"data", {{{"title", "T"},
                 {"paragraphs", {{{"context", "Frugal trains on less GPU."},
                                  {"qas", {{{"id", "q1"}, {"question", "What trains?"}, {"answers", {{{"text", "Frugal"}, {"answer_start", 0}}}}},
                                           {{"id", "q2"}, {"question", "On what?"}, {"answers", {{{"text", "less GPU"}, {"answer_start", 17}}}}}}}}}}}}}};
  write_text(dir / "squad.json", squad.dump());
  ShardWriter squad_out(dir / "squad");
  CHECK(convert_squad(dir / "squad.json", squad_out).samples == 2);
  const auto record = nlohmann::json::parse(read_all(dir / "squad")[1].fields.at("json"));
  CHECK(record.at("id") == "q2");
  CHECK(record.at("context") == "Frugal trains on less GPU.");
  CHECK(record.at("answers")[0].at("answer_start") == 17);

  nlohmann::json broken = squad;
  broken["data"][0]["paragraphs"][0]["qas"][1]["question"] = 7;
  write_text(dir / "broken.json", broken.dump());
  ShardWriter broken_out(dir / "broken");
  CHECK_THROWS_WITH(convert_squad(dir / "broken.json", broken_out),
                    Catch::Contains("broken.json") && Catch::Contains("$.data[0].paragraphs[0].qas[1].question: expected string"));

  nlohmann::json empty = squad;
  empty["data"][0]["paragraphs"] = nlohmann::json::array();
  write_text(dir / "empty.json", empty.dump());
  ShardWriter empty_out(dir / "empty");
  CHECK_THROWS_WITH(convert_squad(dir / "empty.json", empty_out), Catch::Contains("empty.json") && Catch::Contains("nothing to convert"));

  // Converted as they are, but said, naming the file: questions without answers, and answers
  // that are not what the context holds at answer_start (counted in characters, not bytes).
  ShardWriter again_out(dir / "squad_again");
  CHECK(convert_squad(dir / "squad.json", again_out).warnings.empty());
  nlohmann::json odd = squad;
  auto& qas = odd["data"][0]["paragraphs"][0]["qas"];
  odd["data"][0]["paragraphs"][0]["context"] = "Café Frugal trains on less GPU.";
  qas[0]["answers"] = {{{"text", "Frugal"}, {"answer_start", 5}}};  // byte 6: right in characters
  qas[1]["answers"] = {{{"text", "more GPU"}, {"answer_start", 22}}};
  qas.push_back({{"id", "q3"}, {"question", "Why?"}, {"answers", nlohmann::json::array()}});
  write_text(dir / "odd.json", odd.dump());
  ShardWriter odd_out(dir / "odd");
  const ConvertResult converted = convert_squad(dir / "odd.json", odd_out);
  CHECK(converted.samples == 3);
  REQUIRE(converted.warnings.size() == 2);
  CHECK_THAT(converted.warnings[0], Catch::Contains("odd.json") && Catch::Contains("1 of 3 questions have no answer"));
  CHECK_THAT(converted.warnings[1], Catch::Contains("odd.json") && Catch::Contains("1 of 2 answers differ") &&
                                        Catch::Contains("$.data[0].paragraphs[0].qas[1].answers[0]"));
  qas[0]["answers"] = {{{"text", "."}, {"answer_start", 31}}};  // 31 characters: past the end, though not past the 32 bytes
  write_text(dir / "outside.json", odd.dump());
  ShardWriter outside_out(dir / "outside");
  CHECK_THROWS_WITH(convert_squad(dir / "outside.json", outside_out),
                    Catch::Contains("outside.json") && Catch::Contains("qas[0].answers[0].answer_start: 31 puts the answer outside its 31-character context"));
}

TEST_CASE("NPY arrays round-trip in every supported dtype, and malformed arrays name the offset", "[data]") {
  for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kLong, torch::kInt, torch::kUInt8, torch::kBool}) {
    const torch::Tensor x = (torch::arange(24) % 5).reshape({2, 3, 4}).to(dtype);
    const torch::Tensor y = decode_npy(encode_npy(x), "x");
    CHECK(y.scalar_type() == dtype);
    CHECK(torch::equal(x, y));
  }
  CHECK(decode_npy(encode_npy(torch::tensor(3.5)), "scalar").item<double>() == 3.5);
  CHECK(decode_npy(encode_npy(torch::zeros({0, 3})), "empty").sizes() == torch::IntArrayRef({0, 3}));
  std::string bytes = encode_npy(torch::ones({4}));
  try {
    decode_npy(std::string_view(bytes).substr(0, bytes.size() - 3), "short.npy");
    FAIL("no error");
  } catch (const DataError& e) {
    CHECK(e.offset() == static_cast<int64_t>(bytes.size()) - 16);  // where the 16 data bytes start
    CHECK_THAT(e.what(), Catch::Contains("short.npy"));
  }
  CHECK_THROWS_WITH(decode_npy(std::string("\x93NUMPY\x01\x00\xff\xff", 10), "x"), Catch::Contains("runs past the end"));
  // Found by the npy fuzz target: an empty array (a 0 in its shape) whose other sizes overflow
  // the strides reached LibTorch's "Stride calculation overflowed" instead of a DataError.
  std::string empty = encode_npy(torch::zeros({0, 3}));
  const std::string huge = "(0, 400000000000000000, 400000000000000000)";
  empty.replace(empty.find("(0, 3)"), 6, huge);
  empty.erase(empty.rfind('\n') - (huge.size() - 6), huge.size() - 6);  // from the padding: the header keeps its length
  CHECK_THROWS_WITH(decode_npy(empty, "strides.npy"), Catch::Contains("bad NPY shape (0, 400000000000000000"));
}

TEST_CASE("JPEG decoding matches Pillow, DCT scaling decodes small, a truncated JPEG names the file", "[data][python]") {
  const auto dir = scratch_dir("jpeg_parity");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const torch::Tensor image = torch::nn::functional::interpolate(
      torch::rand({1, 3, 8, 10}, gen) * 255, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{120, 160}).mode(torch::kBilinear).align_corners(false))
      .squeeze(0).permute({1, 2, 0}).round().to(torch::kUInt8).contiguous();
  const std::string jpeg = encode_jpeg(image, 92);
  write_text(dir / "test.jpg", jpeg);
  run_python_reference("webdataset_tar.py", "jpeg " + (dir / "test.jpg").string() + " " + (dir / "pillow.npy").string());
  std::ifstream in(dir / "pillow.npy", std::ios::binary);
  const torch::Tensor pillow = decode_npy(std::string(std::istreambuf_iterator<char>(in), {}), "pillow.npy");
  const torch::Tensor ours = decode_jpeg(jpeg, "test.jpg");
  REQUIRE(ours.sizes() == pillow.sizes());
  // Both are libjpeg-turbo; the upsampling of chroma may differ by a level or two.
  CHECK((ours.to(torch::kInt) - pillow.to(torch::kInt)).abs().max().item<int>() <= 3);
  CHECK((ours.to(torch::kFloat) - image.to(torch::kFloat)).abs().mean().item<float>() < 3.0f);

  const torch::Tensor small = decode_jpeg(jpeg, "test.jpg", 40, 30);
  CHECK(small.sizes() == torch::IntArrayRef({30, 40, 3}));  // 1/4 scale
  CHECK(jpeg_size(jpeg, "test.jpg").width == 160);
  CHECK_THROWS_WITH(decode_jpeg(jpeg.substr(0, jpeg.size() / 2), "half.jpg"), Catch::Contains("half.jpg"));
  CHECK_THROWS_WITH(decode_jpeg("GIF89a", "fake.jpg"), Catch::Contains("fake.jpg"));

  // A header that claims more pixels than exist (a decompression bomb): refused before any
  // allocation, in the full-size decode and the DCT-scaled one alike (65500 x 65500 is past INT_MAX
  // pixels, where a 32-bit product once skipped the scaling and asked for 12.6 GB).
  std::string bomb = jpeg;
  const size_t sof = bomb.find("\xFF\xC0");
  REQUIRE(sof != std::string::npos);
  bomb.replace(sof + 5, 4, std::string("\xFF\xDC\xFF\xDC", 4));  // height, width: 65500 each
  REQUIRE(jpeg_size(bomb, "bomb.jpg").width == 65500);
  for (int min_side : {0, 224}) {
    CHECK_THROWS_WITH(decode_jpeg(bomb, "bomb.jpg", min_side, min_side),
                      Catch::Contains("bomb.jpg") && Catch::Contains("65500 x 65500 pixels is above the limit of 89478485"));
  }
  const int64_t limit = max_image_pixels();
  set_max_image_pixels(100 * 100);
  CHECK_THROWS_WITH(decode_jpeg(jpeg, "test.jpg"), Catch::Contains("160 x 120 pixels is above the limit of 10000"));
  set_max_image_pixels(limit);
  CHECK_THROWS_AS(set_max_image_pixels(0), OptionError);
}

TEST_CASE("CMYK JPEGs (Adobe's inverted CMYK, as some of ImageNet's) decode to the RGB Pillow gives", "[data][python]") {
  const auto dir = scratch_dir("jpeg_cmyk");
  const fs::path source = fs::path(frugal::testing::source_dir()) / "tests" / "fuzz" / "corpus" / "jpeg" / "cmyk.jpg";  // written by Pillow
  run_python_reference("webdataset_tar.py", "jpeg " + source.string() + " " + (dir / "pillow.npy").string());
  std::ifstream in(dir / "pillow.npy", std::ios::binary);
  const torch::Tensor pillow = decode_npy(std::string(std::istreambuf_iterator<char>(in), {}), "pillow.npy");
  const std::string jpeg = bytes_of(source);
  CHECK(jpeg_size(jpeg, "cmyk.jpg").cmyk);
  const torch::Tensor ours = decode_jpeg(jpeg, "cmyk.jpg");
  REQUIRE(ours.sizes() == pillow.sizes());
  CHECK((ours.to(torch::kInt) - pillow.to(torch::kInt)).abs().max().item<int>() <= 1);
  CHECK(decode_jpeg(jpeg, "cmyk.jpg", 20, 15).size(2) == 3);  // the DCT-scaled path too
}
