// A checkpoint written by an earlier Frugal still resumes: tests/checkpoint/fixtures/step12/ was
// written on 2026-12-05, before the Trainer's policies were redesigned (issue 32), by the run
// below stopped at step 12 (fp16 loss scaling, accumulation, early stopping and the recovery
// ladder carry state in it). Resumed to step 20, it must end where an uninterrupted run ends.
//
// The fixture is written again (only when the format changes on purpose) by this test with
// FRUGAL_WRITE_CHECKPOINT_FIXTURE=tests/checkpoint/fixtures/step12 in the environment, run as
// build/tests/frugal_checkpoint_tests "[compat]".
#include <catch2/catch.hpp>

#include <cstdlib>

#include "support/checkpointed_run.hpp"
#include "support/source_dir.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

struct Run : CheckpointedRun {
  std::shared_ptr<MixedPrecisionPolicy> precision;
};

Run make_run(const fs::path& checkpoints, int64_t max_steps, uint64_t init_seed) {
  Run r{checkpointed_run(TrainerOptions().device("cpu").run_dir("").max_epochs(10).max_steps(max_steps).validate_every_n_steps(4),
                         CheckpointOptions().dir(checkpoints.string()).every_n_steps(4), CheckpointedRunOptions().init_seed(init_seed)),
        nullptr};
  r.trainer->set_validation_data(blobs(32, 9));
  r.precision = add_stateful_policies(r);
  r.trainer->add_policy(std::make_shared<EarlyStoppingPolicy>(EarlyStoppingOptions().patience(100)));
  r.trainer->add_policy(std::make_shared<RecoveryPolicy>(RecoveryOptions().min_history(3)));
  return r;
}

void copy_folder(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

}  // namespace

TEST_CASE("a checkpoint written before the policy redesign resumes to the same weights", "[checkpoint][resume][compat]") {
  torch::set_num_threads(1);
  if (const char* out = std::getenv("FRUGAL_WRITE_CHECKPOINT_FIXTURE")) {
    const auto work = scratch_dir("old_checkpoint_write");
    Run writer = make_run(work / "checkpoints", 12, 1);
    CHECK(writer.trainer->fit().state.step == 12);
    const auto latest = CheckpointStore(work / "checkpoints").latest();
    REQUIRE(latest);
    fs::remove_all(out);
    copy_folder(*latest, fs::path(out) / latest->filename());
    std::ofstream(fs::path(out) / "latest") << latest->filename().string();
    WARN("fixture written to " << out);
    return;
  }
  const fs::path fixture = fs::path(source_dir()) / "tests" / "checkpoint" / "fixtures" / "step12";
  REQUIRE(fs::exists(fixture / "latest"));
  const auto root = scratch_dir("old_checkpoint");
  copy_folder(fixture, root / "checkpoints");

  // Restored as written: every stored tensor and counter comes back.
  CheckpointStore store(root / "checkpoints");
  const auto found = store.find_latest_valid();
  REQUIRE(found);
  CHECK(found->skipped.empty());
  const TrainingSnapshot stored = store.read(found->info);
  Run probe = make_run(root / "unused", 12, 7);
  probe.trainer->restore(stored);
  const TrainingSnapshot restored = probe.trainer->snapshot();
  CHECK(restored.state.step == 12);
  CHECK(restored.state.micro_step == 24);
  for (const auto& [name, tensor] : stored.tensors) {
    INFO(name);
    REQUIRE(restored.tensors.count(name) == 1);
    CHECK(torch::equal(restored.tensors.at(name), tensor));
  }

  // Trained on to step 20, it ends where an uninterrupted run ends (bitwise where it was written;
  // within rounding on another CPU).
  Run clean = make_run(root / "clean", 20, 1);
  clean.trainer->fit();
  Run resumed = make_run(root / "checkpoints", 20, 3);
  const FitResult result = resumed.trainer->fit();
  CHECK(result.state.step == 20);
  CHECK(result.state.micro_step == 40);
  CHECK(resumed.precision->scaler().scale_value() == clean.precision->scaler().scale_value());
  CHECK(torch::allclose(flat_parameters(*clean.net), flat_parameters(*resumed.net), 1e-5, 1e-6));

  // The check can fail: a run that does not resume ends elsewhere.
  Run fresh = make_run(root / "fresh", 20, 3);
  fresh.trainer->fit();
  CHECK_FALSE(torch::allclose(flat_parameters(*clean.net), flat_parameters(*fresh.net), 1e-5, 1e-6));
}
