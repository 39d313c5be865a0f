// The checkpoint store: round trip, detection of damaged checkpoints with fallback to the
// previous valid one, a failed write that leaves the previous checkpoint intact, retention and
// archiving.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <zlib.h>

#include <csignal>
#include <fstream>
#include <sstream>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

TrainingSnapshot snapshot_at(int64_t step, double loss = 1.0) {
  TrainingSnapshot s;
  s.tensors["model/w"] = torch::full({64, 64}, static_cast<float>(step));
  s.tensors["policy/x/scale"] = torch::tensor(3.5);
  s.optimizer = std::string(1000, static_cast<char>('a' + step % 26));
  s.state.step = step;
  s.state.epoch = step / 10;
  s.state.last_validation = {{"loss", loss}};
  s.data = {step / 10, step % 10, 7};
  return s;
}

void write_steps(const CheckpointStore& store, std::initializer_list<int64_t> steps) {
  for (int64_t s : steps) store.write(snapshot_at(s), {});
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

}  // namespace

TEST_CASE("a written checkpoint verifies and reads back exactly", "[checkpoint][store]") {
  CheckpointStore store(scratch_dir("store_roundtrip"));
  auto info = store.write(snapshot_at(5), CheckpointWriteOptions{Precision::fp32, "[trainer]\nmax_epochs = 1\n", {}});
  CHECK(info.step == 5);
  CHECK(info.dir.filename() == "ckpt-000000005");
  CHECK(store.verify(info.dir).empty());
  CHECK(store.latest() == std::optional<fs::path>(info.dir));
  CHECK(fs::exists(info.dir / "config.toml"));
  auto found = store.find_latest_valid();
  REQUIRE(found);
  auto back = store.read(found->info);
  CHECK(torch::equal(back.tensors.at("model/w"), torch::full({64, 64}, 5.0f)));
  CHECK(back.tensors.at("policy/x/scale").item<double>() == 3.5);
  CHECK(back.optimizer == snapshot_at(5).optimizer);
  CHECK(back.state.step == 5);
  CHECK(back.data.batch_index == 5);
  CHECK(back.state.last_validation.at("loss") == 1.0);
}

TEST_CASE("damaged checkpoints are reported with file and reason, and the previous valid one is used", "[checkpoint][store]") {
  struct Damage {
    std::string name;
    std::function<void(const fs::path&)> apply;
    std::string reason;
  };
  const std::vector<Damage> damages{
      {"truncated", [](const fs::path& d) { fs::resize_file(d / "state.pt", fs::file_size(d / "state.pt") / 2); },
       "state.pt is"},
      {"flipped byte",
       [](const fs::path& d) {
         std::fstream f(d / "optimizer.pt", std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(500);
         f.put('#');
       },
       "optimizer.pt fails its checksum"},
      {"missing file", [](const fs::path& d) { fs::remove(d / "meta.json"); }, "missing file meta.json"},
      {"no manifest", [](const fs::path& d) { fs::remove(d / "manifest.json"); }, "no manifest.json"},
  };
  for (const auto& damage : damages) {
    SECTION(damage.name) {
      CheckpointStore store(scratch_dir("store_damage"));
      write_steps(store, {2, 4});
      damage.apply(store.root() / "ckpt-000000004");
      auto found = store.find_latest_valid();
      REQUIRE(found);
      CHECK(found->info.step == 2);
      REQUIRE(found->skipped.size() == 1);
      CHECK_THAT(found->skipped[0], Catch::Contains("ckpt-000000004") && Catch::Contains(damage.reason));
    }
  }
  SECTION("missing latest pointer") {
    CheckpointStore store(scratch_dir("store_damage"));
    write_steps(store, {2, 4});
    fs::remove(store.root() / "latest");
    auto found = store.find_latest_valid();
    REQUIRE(found);
    CHECK(found->info.step == 4);
    CHECK_THAT(joined(found->skipped), Catch::Contains("latest: missing"));
  }
  SECTION("nothing valid at all") {
    CheckpointStore store(scratch_dir("store_damage"));
    write_steps(store, {2});
    fs::remove(store.root() / "ckpt-000000002" / "state.pt");
    CHECK_FALSE(store.find_latest_valid().has_value());
  }
}

TEST_CASE("a write that fails midway (disk full) leaves the previous checkpoint and pointer intact", "[checkpoint][store]") {
  CheckpointStore store(scratch_dir("store_full"));
  const bool first = GENERATE(false, true);  // true: no earlier checkpoint, and the message says so
  if (!first) write_steps(store, {3});
  // A file-size limit makes writes fail midway, as a full disk does (EFBIG instead of ENOSPC).
  auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 8 * 1024;
  setrlimit(RLIMIT_FSIZE, &small);
  std::string error;
  try {
    TrainingSnapshot big = snapshot_at(6);
    big.tensors["model/w"] = torch::zeros({256, 256});  // 256 KiB: cannot fit
    store.write(big, {});
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  CHECK_FALSE(fs::exists(store.root() / "ckpt-000000006.tmp"));
  CHECK_FALSE(fs::exists(store.root() / "ckpt-000000006"));
  if (first) {
    CHECK_THAT(error, Catch::Contains("writing checkpoint of step 6") && Catch::Contains("(no earlier checkpoint exists)"));
    CHECK_FALSE(store.latest().has_value());
    return;
  }
  CHECK_THAT(error, Catch::Contains("writing checkpoint of step 6") && Catch::Contains("previous checkpoint, ckpt-000000003, is untouched"));
  CHECK(store.latest() == std::optional<fs::path>(store.root() / "ckpt-000000003"));
  auto found = store.find_latest_valid();
  REQUIRE(found);
  CHECK(found->info.step == 3);
}

TEST_CASE("retention keeps the last N and the best K, and deletes or archives the rest", "[checkpoint][retention]") {
  const auto root = scratch_dir("retention");
  auto write_losses = [&](const fs::path& dir) {
    CheckpointStore store(dir);
    const std::vector<std::pair<int64_t, double>> losses{{1, 0.9}, {2, 0.3}, {3, 0.5}, {4, 0.6}, {5, 0.7}, {6, 0.8}};
    for (auto [step, loss] : losses) store.write(snapshot_at(step, loss), {});
    return store;
  };
  auto steps_in = [](const fs::path& dir) {
    std::vector<int64_t> steps;
    for (const auto& c : CheckpointStore(dir).list()) steps.push_back(c.step);
    return steps;
  };
  SECTION("delete") {
    auto store = write_losses(root / "a");
    CheckpointPolicy policy(CheckpointOptions().dir(store.root().string()).keep_last(2).keep_best(1).monitor("loss"));
    policy.apply_retention();
    CHECK(steps_in(store.root()) == std::vector<int64_t>{2, 5, 6});
  }
  SECTION("archive beyond retention") {
    auto store = write_losses(root / "b");
    const auto cold = root / "cold";
    CheckpointPolicy policy(CheckpointOptions().dir(store.root().string()).keep_last(1).keep_best(1).archive_dir(cold.string()));
    policy.apply_retention();
    CHECK(steps_in(store.root()) == std::vector<int64_t>{2, 6});
    CHECK(steps_in(cold) == std::vector<int64_t>{1, 3, 4, 5});
    CHECK(CheckpointStore(cold).verify(cold / "ckpt-000000003").empty());  // moved whole
  }
  SECTION("archive by age; the best stay") {
    auto store = write_losses(root / "c");
    // Age checkpoints 2 (the best) and 3 by ten days.
    for (int64_t step : {2, 3}) {
      const auto meta_path = store.root() / ("ckpt-00000000" + std::to_string(step)) / "meta.json";
      std::ifstream in(meta_path);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto at = text.find("\"unix_time\":");
      const auto end = text.find_first_of(",\n}", at + 12);
      text.replace(at, end - at, "\"unix_time\": 1000.0");
      std::ofstream(meta_path) << text;
    }
    const auto cold = root / "cold_age";
    CheckpointPolicy policy(CheckpointOptions().dir(store.root().string()).keep_last(0).keep_best(1).archive_dir(cold.string())
                                .archive_after_days(7));
    policy.apply_retention();
    CHECK(steps_in(store.root()) == std::vector<int64_t>{1, 2, 4, 5, 6});
    CHECK(steps_in(cold) == std::vector<int64_t>{3});
  }
}

namespace {

// A one-rank sharded checkpoint of one parameter "w" (6 elements), whose meta.json's sharding
// part is `sharding`; the manifest matches the files, so only the counts inside can be wrong.
fs::path sharded_checkpoint(const fs::path& root, const std::string& sharding) {
  auto bytes_of_archive = [](torch::serialize::OutputArchive& a) {
    std::ostringstream out;
    a.save_to(out);
    return out.str();
  };
  torch::serialize::OutputArchive state, weights;
  state.write("t0", torch::zeros({3}), true);
  weights.write("w0", torch::ones({6}), true);
  const std::string meta =
      R"({"format": 1, "step": 1, "unix_time": 0, "weights_dtype": "fp32", "world_size": 1,
          "state": {"epoch": 0, "micro_step": 1, "step": 1, "skipped_steps": 0, "samples_seen": 4, "lr": 0.1, "last_validation": {}},
          "data": {"epoch": 0, "batch_index": 1, "seed": 0, "batch_size": 4}, "tensors": ["model/b"], "sharding": )" +
      sharding + "}";
  const fs::path dir = root / "ckpt-000000001";
  fs::create_directories(dir);
  const std::vector<std::pair<std::string, std::string>> files{{"state.pt", bytes_of_archive(state)},
                                                               {"meta.json", meta},
                                                               {"shard-00000-of-00001.weights.pt", bytes_of_archive(weights)},
                                                               {"shard-00000-of-00001.optimizer.pt", "x"}};
  std::string manifest = "{\"files\": [";
  for (size_t i = 0; i < files.size(); ++i) {
    std::ofstream(dir / files[i].first, std::ios::binary) << files[i].second;
    const auto crc = crc32(0, reinterpret_cast<const Bytef*>(files[i].second.data()), static_cast<uInt>(files[i].second.size()));
    manifest += (i ? "," : "") + c10::str("{\"name\": \"", files[i].first, "\", \"size\": ", files[i].second.size(), ", \"crc32\": ", crc, "}");
  }
  std::ofstream(dir / "manifest.json") << manifest + "]}";
  return dir;
}

}  // namespace

TEST_CASE("counts in a checkpoint's meta.json are checked before anything is sized by them", "[checkpoint][store]") {
  const auto piece = R"({"param": "w", "begin": 0, "numel": 6, "group": 0, "index": 0})";
  {  // A world of 2^40 ranks: verifying would list 2^41 shard files.
    const auto root = scratch_dir("meta_counts_world");
    const auto dir = sharded_checkpoint(root, std::string(R"({"world_size": 1099511627776, "shapes": {"w": [2, 3]}, "pieces": [[)") + piece + "]]}");
    CHECK_THAT(CheckpointStore(root).verify(dir), Catch::Contains("sharding.world_size 1099511627776 is not a world size"));
  }
  {  // A parameter of 2^40 elements of which the files hold 6: consolidating would allocate 4 TB.
    const auto root = scratch_dir("meta_counts_shape");
    sharded_checkpoint(root, std::string(R"({"world_size": 1, "shapes": {"w": [1048576, 1048576]}, "pieces": [[)") + piece + "]]}");
    CheckpointStore store(root);
    REQUIRE(store.verify(store.list().front().dir).empty());
    CHECK_THROWS_WITH(consolidated_weights(store, store.list().front()), Catch::Contains("cover 6 of its 1099511627776 elements"));
  }
  {  // Pieces that claim more elements than the shard files could hold.
    const auto root = scratch_dir("meta_counts_files");
    sharded_checkpoint(root, R"({"world_size": 1, "shapes": {"w": [1048576, 1048576]},
                                 "pieces": [[{"param": "w", "begin": 0, "numel": 1099511627776, "group": 0, "index": 0}]]})");
    CheckpointStore store(root);
    CHECK_THROWS_WITH(store.read(store.list().front()), Catch::Contains("claim 1099511627776 elements"));
  }
  {  // A shape whose element count overflows 64 bits.
    const auto root = scratch_dir("meta_counts_overflow");
    sharded_checkpoint(root, std::string(R"({"world_size": 1, "shapes": {"w": [4294967296, 4294967296]}, "pieces": [[)") + piece + "]]}");
    CheckpointStore store(root);
    CHECK_THROWS_WITH(store.read(store.list().front()), Catch::Contains("'w' has shape [4294967296, 4294967296]"));
  }
}
