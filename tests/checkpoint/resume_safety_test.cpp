// Checkpoints that cannot fool a resume: a manifest naming files outside the checkpoint, a
// manifest rewritten to match a truncated file, a junk ckpt-* folder, a `latest` pointer to
// nowhere; damaged checkpoints are moved aside, the previous valid one is used, and a run whose
// every checkpoint is damaged refuses to start from scratch unless told to; a SIGTERM before
// training starts ends the program cleanly.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/checkpointed_run.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

CheckpointedRun make_run(const fs::path& dir, int64_t max_steps, bool resume = true) {
  return checkpointed_run(TrainerOptions().device("cpu").run_dir(dir.string()).max_epochs(10).max_steps(max_steps).log_every_n_steps(1000),
                          CheckpointOptions().every_n_steps(2).keep_last(2).async(false).at_end(false).resume(resume),
                          CheckpointedRunOptions().init_seed(3).examples(64).data(DataLoaderOptions().batch_size(8)));
}

fs::path ckpt(const fs::path& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%09lld", static_cast<long long>(step));
  return dir / "checkpoints" / name;
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary | std::ios::trunc) << text; }

// Rewrites the manifest entry of `file` to the file's present size and CRC, as a tool that
// "repairs" checksums would.
void refit_manifest(const fs::path& dir, const std::string& file) {
  std::string manifest = bytes_of(dir / "manifest.json");
  auto parsed = nlohmann::json::parse(manifest);
  const std::string bytes = bytes_of(dir / file);
  for (auto& f : parsed["files"]) {
    if (f["name"] == file) {
      f["size"] = bytes.size();
      f.erase("xxh3");  // as an older manifest: a CRC-32, which the reader still takes
      f["crc32"] = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()));
    }
  }
  write_text(dir / "manifest.json", parsed.dump());
}

}  // namespace

TEST_CASE("a manifest naming a file outside the checkpoint is refused, the checkpoint moved aside", "[checkpoint][resume]") {
  const fs::path dir = scratch_dir("resume_outside");
  make_run(dir, 4).trainer->fit();
  const fs::path newest = ckpt(dir, 4);
  // state.pt copied two folders up, the manifest pointed at it: it would verify, and load.
  fs::copy_file(newest / "state.pt", dir / "outside.pt");
  std::string manifest = bytes_of(newest / "manifest.json");
  manifest.replace(manifest.find("\"state.pt\""), 10, "\"../../outside.pt\"");
  write_text(newest / "manifest.json", manifest);
  CHECK_THAT(CheckpointStore(dir / "checkpoints").verify(newest), Catch::Contains("'../../outside.pt', which is not a plain file name"));

  CheckpointedRun next = make_run(dir, 6);
  next.trainer->fit();
  CHECK(next.trainer->state().step == 6);
  CHECK(fs::exists(newest.string() + ".damaged"));
  CHECK(CheckpointStore(dir / "checkpoints").verify(newest).empty());  // step 4 written again, whole
}

TEST_CASE("a checkpoint whose manifest was refitted to a truncated file falls back to the previous one", "[checkpoint][resume]") {
  const fs::path dir = scratch_dir("resume_refitted");
  make_run(dir, 4).trainer->fit();
  const fs::path newest = ckpt(dir, 4);
  for (const char* file : {"optimizer.pt", "state.pt"}) {
    SECTION(file) {
      const std::string bytes = bytes_of(newest / file);
      write_text(newest / file, bytes.substr(0, bytes.size() / 2));
      refit_manifest(newest, file);
      REQUIRE(CheckpointStore(dir / "checkpoints").verify(newest).empty());  // the manifest is fooled
      CheckpointedRun next = make_run(dir, 6);
      next.trainer->fit();
      // Resumed from step 2: steps 3..6 ran, so the run saved step 4 again.
      CHECK(next.trainer->state().step == 6);
      CHECK(CheckpointStore(dir / "checkpoints").verify(ckpt(dir, 6)).empty());
    }
  }
}

TEST_CASE("a junk ckpt-* folder takes no keep_last slot and the newest valid checkpoint is used", "[checkpoint][resume][retention]") {
  const fs::path dir = scratch_dir("resume_junk");
  make_run(dir, 4).trainer->fit();
  fs::create_directories(ckpt(dir, 99));
  write_text(ckpt(dir, 99) / "meta.json", "not json");
  CheckpointedRun next = make_run(dir, 8);
  next.trainer->fit();
  CHECK(next.trainer->state().step == 8);
  CHECK(fs::exists(ckpt(dir, 99).string() + ".damaged"));
  // keep_last 2: the two newest real checkpoints, not the junk.
  const auto kept = CheckpointStore(dir / "checkpoints").list();
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].step == 6);
  CHECK(kept[1].step == 8);
}

TEST_CASE("retention deletes by renaming aside: what a kill midway leaves is no checkpoint and is cleared at the next start",
          "[checkpoint][resume][retention]") {
  const fs::path dir = scratch_dir("resume_deleting");
  make_run(dir, 6).trainer->fit();  // checkpoints 2, 4, 6; keep_last 2 deleted 2
  CHECK_FALSE(fs::exists(ckpt(dir, 2)));
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints")) {
    CHECK(entry.path().extension() != ".deleting");  // a finished deletion leaves nothing
  }
  // A deletion killed midway: half of a folder under its aside name, even a newer step's.
  for (int64_t step : {2, 8}) {
    fs::create_directories(ckpt(dir, step).string() + ".deleting");
    fs::copy_file(ckpt(dir, 6) / "meta.json", ckpt(dir, step).string() + ".deleting/meta.json");
  }
  CHECK(CheckpointStore(dir / "checkpoints").list().size() == 2);  // 4 and 6 only
  CheckpointedRun next = make_run(dir, 10);
  next.trainer->fit();
  CHECK(next.trainer->state().step == 10);
  CHECK(next.trainer->state().micro_step == 10);  // resumed at 6, not at the leftover's "step 8"
  for (int64_t step : {2, 8}) CHECK_FALSE(fs::exists(ckpt(dir, step).string() + ".deleting"));
  const auto kept = CheckpointStore(dir / "checkpoints").list();
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].step == 8);
  CHECK(kept[1].step == 10);
}

TEST_CASE("a latest pointer to nowhere is ignored (with a warning) and never leads outside", "[checkpoint][resume]") {
  const fs::path dir = scratch_dir("resume_latest");
  make_run(dir, 4).trainer->fit();
  const CheckpointStore store(dir / "checkpoints");
  for (const std::string& junk : {std::string("../../.."), std::string("ckpt-000000077"), std::string("\x01garbage")}) {
    write_text(store.root() / "latest", junk);
    CHECK_FALSE(store.latest().has_value());
    CHECK(store.latest_name() == junk);
  }
  CheckpointedRun next = make_run(dir, 6);
  next.trainer->fit();
  CHECK(next.trainer->state().step == 6);
  CHECK(store.latest() == std::optional<fs::path>(ckpt(dir, 6)));
}

TEST_CASE("when every checkpoint is damaged the run refuses to start from scratch unless told to", "[checkpoint][resume]") {
  const fs::path dir = scratch_dir("resume_all_damaged");
  make_run(dir, 4).trainer->fit();
  for (int64_t step : {2, 4}) write_text(ckpt(dir, step) / "state.pt", "torn");
  std::string error;
  try {
    make_run(dir, 6).trainer->fit();
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  INFO(error);
  CHECK_THAT(error, Catch::Contains("no checkpoint in") && Catch::Contains("can be resumed from, though some exist"));
  CHECK_THAT(error, Catch::Contains("ckpt-000000004 (moved aside to ckpt-000000004.damaged)"));
  CHECK_THAT(error, Catch::Contains("--checkpoint.resume=false"));
  // A second start sees only the damaged folders: still refused, not a silent fresh start.
  CHECK_THROWS_WITH(make_run(dir, 6).trainer->fit(), Catch::Contains("moved aside earlier"));
  CheckpointedRun fresh = make_run(dir, 2, /*resume=*/false);
  fresh.trainer->fit();
  CHECK(fresh.trainer->state().step == 2);
}

TEST_CASE("SIGTERM before training starts (data or model still loading) ends the program cleanly: exit 0, nothing written",
          "[checkpoint][preemption]") {
  const auto dir = scratch_dir("early_sigterm") / "run";
  StandardOptions options;
  Config config;
  bind(config, options);
  const std::string run_dir = "--trainer.run_dir=" + dir.string();
  std::vector<const char*> argv{"prog", "--checkpoint.enabled=true", "--trainer.device=cpu", run_dir.c_str()};
  int reached = 0;
  const int code = run_program("test", [&] {
    (void)start_program(static_cast<int>(argv.size()), const_cast<char**>(argv.data()), config, options, "test");
    std::raise(SIGTERM);  // without the handler start_program installed, this ends the test process
    reached = 1;
    preemption::stop_if_requested("loading the data");
    reached = 2;
    return 3;
  });
  CHECK(reached == 1);
  CHECK(code == 0);

  // A signal between loading and the fit: the fit stops before its first step, writing nothing.
  CheckpointedRun r = make_run(dir, 8);
  std::raise(SIGTERM);
  CHECK_THROWS_AS(r.trainer->fit(), Preempted);
  CHECK(r.trainer->state().step == 0);
  CHECK_FALSE(fs::exists(dir / "checkpoints"));
  CHECK(preemption::requested() == 0);
}
