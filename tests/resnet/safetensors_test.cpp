#include <catch2/catch.hpp>

#include <fstream>

#include "frugal/errors.hpp"
#include "frugal/io/safetensors.hpp"
#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

// A file with the given header text and `data_bytes` zero bytes of data.
fs::path handmade(const fs::path& dir, const std::string& name, const std::string& header, size_t data_bytes) {
  const fs::path path = dir / name;
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
  return path;
}

std::string error_of(const fs::path& path) {
  try {
    read_safetensors(path);
  } catch (const DataError& e) {
    CHECK(e.file() == path.string());
    return e.what();
  }
  FAIL("no DataError for " << path);
  return "";
}

}  // namespace

TEST_CASE("safetensors round-trips every dtype, shape and layout, and metadata", "[safetensors]") {
  const fs::path dir = scratch_dir("safetensors_roundtrip");
  std::vector<std::pair<std::string, torch::Tensor>> tensors{
      {"f32", torch::randn({3, 4})},
      {"f64", torch::randn({2}, torch::kFloat64)},
      {"f16", torch::randn({5}).to(torch::kHalf)},
      {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"i64", torch::arange(6, torch::kInt64).reshape({2, 3})},
      {"i32", torch::arange(4, torch::kInt32)},
      {"u8", torch::arange(7, torch::kUInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(int64_t{42})},
      {"empty", torch::zeros({0, 3})},
      {"channels_last", torch::randn({2, 3, 4, 5}).contiguous(torch::MemoryFormat::ChannelsLast)},
      {"transposed", torch::randn({4, 3}).t()}};
  write_safetensors(dir / "all.safetensors", tensors, {{"format", "pt"}, {"note", "hello"}});
  SafetensorsReader reader(dir / "all.safetensors");
  CHECK(reader.metadata().at("note") == "hello");
  CHECK(reader.names().size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const torch::Tensor back = reader.read(name);
    CHECK(back.scalar_type() == t.scalar_type());
    CHECK(back.sizes() == t.sizes());
    CHECK(back.is_contiguous());
    CHECK(torch::equal(back, t));
  }
  CHECK(!fs::exists(dir / "all.safetensors.partial"));
  // The data section starts 8-byte aligned.
  uint64_t header = 0;
  std::memcpy(&header, bytes_of(dir / "all.safetensors").data(), 8);
  CHECK(header % 8 == 0);
  CHECK_THROWS_AS(write_safetensors(dir / "dup.safetensors", {{"a", torch::ones(1)}, {"a", torch::ones(1)}}), OptionError);
}

TEST_CASE("safetensors files interoperate with the Python safetensors package", "[safetensors][python]") {
  const fs::path dir = scratch_dir("safetensors_python");
  write_safetensors(dir / "frugal.safetensors", {{"weight", torch::arange(12, torch::kFloat32).reshape({3, 4})},
                                                 {"half", torch::full({2}, 0.5).to(torch::kHalf)}});
  const std::string script = c10::str(
      "-c \"import json; from safetensors.torch import load_file, save_file; import torch; ",
      "t = load_file('", (dir / "frugal.safetensors").string(), "'); ",
      "save_file({'x': torch.arange(6, dtype=torch.int16).reshape(2, 3), 'y': torch.ones(2, dtype=torch.bfloat16)}, '",
      (dir / "python.safetensors").string(), "'); ",
      "print(json.dumps({'sum': t['weight'].sum().item(), 'shape': list(t['weight'].shape), 'half': t['half'].float().tolist()}))\"");
  const std::string command = std::string(FRUGAL_TEST_PYTHON) + " " + script;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out(4096, '\0');
  out.resize(fread(out.data(), 1, out.size(), pipe));
  REQUIRE(pclose(pipe) == 0);
  const auto json = nlohmann::json::parse(out);
  CHECK(json["sum"].get<double>() == 66.0);
  CHECK(json["shape"] == nlohmann::json({3, 4}));
  CHECK(json["half"] == nlohmann::json({0.5, 0.5}));
  const auto back = read_safetensors(dir / "python.safetensors");
  CHECK(torch::equal(back.at("x"), torch::arange(6, torch::kInt16).reshape({2, 3})));
  CHECK(torch::equal(back.at("y"), torch::ones(2, torch::kBFloat16)));
}

TEST_CASE("malformed or truncated safetensors files are DataErrors naming the file, tensor and offset", "[safetensors]") {
  const fs::path dir = scratch_dir("safetensors_bad");
  write_safetensors(dir / "good.safetensors", {{"a", torch::ones({4})}, {"b", torch::ones({2, 2})}});
  const std::string good = bytes_of(dir / "good.safetensors");

  {  // truncated inside the data
    std::ofstream(dir / "truncated.safetensors", std::ios::binary) << good.substr(0, good.size() - 3);
    CHECK_THAT(error_of(dir / "truncated.safetensors"), Catch::Contains("truncated"));
  }
  {  // shorter than the length prefix
    std::ofstream(dir / "tiny.safetensors", std::ios::binary) << "abc";
    CHECK_THAT(error_of(dir / "tiny.safetensors"), Catch::Contains("at byte offset 0") && Catch::Contains("too short"));
  }
  {  // header length beyond the file
    std::string bad = good;
    const uint64_t huge = 1'000'000;
    std::memcpy(bad.data(), &huge, 8);
    std::ofstream(dir / "long_header.safetensors", std::ios::binary) << bad;
    CHECK_THAT(error_of(dir / "long_header.safetensors"), Catch::Contains("header length 1000000"));
  }
  CHECK_THAT(error_of(handmade(dir, "json.safetensors", "{\"a\": [", 0)), Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of(handmade(dir, "dtype.safetensors", R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", 4)),
             Catch::Contains("tensor 'a'") && Catch::Contains("unsupported dtype 'F7'"));
  CHECK_THAT(error_of(handmade(dir, "size.safetensors", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4)),
             Catch::Contains("tensor 'a'") && Catch::Contains("need 8"));
  CHECK_THAT(error_of(handmade(dir, "beyond.safetensors", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)),
             Catch::Contains("truncated"));
  CHECK_THAT(error_of(handmade(dir, "overlap.safetensors",
                               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
             Catch::Contains("tensor 'b' begins at data offset 4"));
  CHECK_THAT(error_of(handmade(dir, "negative.safetensors", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)),
             Catch::Contains("non-negative"));
  CHECK_THAT(error_of(handmade(dir, "overflow.safetensors",
                               R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})", 4)),
             Catch::Contains("too large"));
  CHECK_THAT(error_of(handmade(dir, "meta.safetensors", R"({"__metadata__":{"k":1}})", 0)), Catch::Contains("__metadata__.k"));
  CHECK_THAT(error_of(dir / "absent.safetensors"), Catch::Contains("cannot open"));
}

TEST_CASE("load_safetensors reports missing and unexpected names and refuses a wrong shape", "[safetensors]") {
  const fs::path dir = scratch_dir("safetensors_load");
  torch::nn::Linear linear(3, 2);
  write_safetensors(dir / "w.safetensors", {{"weight", torch::ones({2, 3})}, {"extra", torch::ones(1)}});
  CHECK_THROWS_WITH(load_safetensors(*linear, dir / "w.safetensors"),
                    Catch::Contains("1 tensors missing (first: 'bias')") && Catch::Contains("1 unexpected (first: 'extra')"));
  const LoadReport report = load_safetensors(*linear, dir / "w.safetensors", /*strict=*/false);
  CHECK(report.loaded == std::vector<std::string>{"weight"});
  CHECK(torch::equal(linear->weight, torch::ones({2, 3})));
  write_safetensors(dir / "shape.safetensors", {{"weight", torch::ones({3, 2})}, {"bias", torch::ones(2)}});
  CHECK_THROWS_WITH(load_safetensors(*linear, dir / "shape.safetensors"),
                    Catch::Contains("'weight' has shape [3, 2]") && Catch::Contains("has shape [2, 3]"));
  // A prefix is stripped from the file's names.
  write_safetensors(dir / "prefixed.safetensors", {{"head.weight", torch::full({2, 3}, 2.0)}, {"head.bias", torch::zeros(2)}});
  load_safetensors(*linear, dir / "prefixed.safetensors", true, "head.");
  CHECK(torch::equal(linear->weight, torch::full({2, 3}, 2.0)));
}
