// A checkpoint written on one device type resumes on another (the first epoch on a cheap CPU
// machine, the rest on a GPU): weights and optimizer state move to the resuming run's device, an
// RNG stream the checkpoint lacks is seeded from the step (the same numbers at every resume of it),
// and one this machine has no device for is left unused; the log says both.
#include <catch2/catch.hpp>

#include <iostream>

#include "support/checkpointed_run.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

CheckpointedRun make_run(const fs::path& dir, const std::string& device, int64_t max_steps, uint64_t init_seed = 1) {
  return checkpointed_run(TrainerOptions().device(device).run_dir(dir.string()).max_epochs(10).max_steps(max_steps),
                          CheckpointOptions().every_n_steps(3), CheckpointedRunOptions().init_seed(init_seed));
}

// Restores `s` into a fresh trainer, then draws from the CPU generator; the log of the restore.
std::pair<torch::Tensor, std::string> draw_after_restore(const TrainingSnapshot& s, const fs::path& dir) {
  CheckpointedRun run = make_run(dir, "cpu", 20, /*init_seed=*/99);  // whatever the generator held before must not matter
  const fs::path log_file = dir / "restore.log";
  fs::create_directories(dir);
  log::add_file_sink(log_file);
  run.trainer->restore(s);
  log::remove_file_sink();
  return {torch::rand({8}), bytes_of(log_file)};
}

}  // namespace

TEST_CASE("a checkpoint's RNG streams: one it lacks is seeded from the step (the same at every resume) and one without a device here is unused",
          "[checkpoint][cross_device]") {
  torch::set_num_threads(1);
  const auto root = scratch_dir("cross_device_rng");
  CheckpointedRun run = make_run(root / "written", "cpu", 6);
  run.trainer->fit();
  TrainingSnapshot written = run.trainer->snapshot();
  REQUIRE(written.tensors.count("rng/cpu") == 1);

  // As a GPU machine wrote it for a CPU one: a CUDA stream this machine lacks, no CPU stream.
  TrainingSnapshot elsewhere = written;
  elsewhere.tensors["rng/cuda:7"] = elsewhere.tensors.at("rng/cpu");
  elsewhere.tensors.erase("rng/cpu");
  const auto [first, first_log] = draw_after_restore(elsewhere, root / "a");
  const auto [again, again_log] = draw_after_restore(elsewhere, root / "b");
  CHECK(torch::equal(first, again));
  CHECK_THAT(first_log, Catch::Contains("the checkpoint has no rng/cpu state (written on another device type)"));
  CHECK_THAT(first_log, Catch::Contains("the checkpoint's rng/cuda:7 state has no device here: unused"));
  // The seed depends on the step: another step's checkpoint draws other numbers.
  TrainingSnapshot later = elsewhere;
  later.state.step += 1;
  CHECK_FALSE(torch::equal(first, draw_after_restore(later, root / "c").first));
  // With its own stream the checkpoint's state is used as it was, silently.
  const auto [own, own_log] = draw_after_restore(written, root / "d");
  CHECK_FALSE(torch::equal(own, first));
  CHECK(own_log.find("written on another device type") == std::string::npos);
}

TEST_CASE("a run checkpointed on the CPU resumes on CUDA and then back on the CPU: weights and optimizer state move",
          "[checkpoint][cross_device][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (the CPU -> CUDA -> CPU resume)\n";
    return;
  }
  const auto dir = scratch_dir("cross_device_gpu");
  make_run(dir, "cpu", 6).trainer->fit();

  CheckpointedRun gpu = make_run(dir, "cuda", 12, 2);
  const auto gpu_result = gpu.trainer->fit();
  CHECK(gpu_result.state.step == 12);
  REQUIRE_FALSE(gpu.trainer->optimizer().state().empty());
  for (const auto& [key, state] : gpu.trainer->optimizer().state()) {
    CHECK(static_cast<const torch::optim::AdamWParamState&>(*state).exp_avg().is_cuda());
  }
  for (const auto& p : gpu.net->parameters()) {
    CHECK(p.device().is_cuda());
    CHECK(torch::isfinite(p).all().item<bool>());
  }

  CheckpointedRun cpu = make_run(dir, "cpu", 18, 3);
  const auto cpu_result = cpu.trainer->fit();
  CHECK(cpu_result.state.step == 18);
  for (const auto& p : cpu.net->parameters()) {
    CHECK(p.device().is_cpu());
    CHECK(torch::isfinite(p).all().item<bool>());
  }
}
