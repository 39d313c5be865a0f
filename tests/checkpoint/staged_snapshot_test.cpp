// A checkpoint's snapshot is staged: the training thread aliases the weights and the optimizer's
// state, the writer thread copies them, and the run waits for that copy before the next step
// changes them. A copy that comes late must still see the step it was taken at.
#include <catch2/catch.hpp>

#include <chrono>
#include <iostream>
#include <thread>

#include "support/checkpointed_run.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

// At step `at`: a whole snapshot (the expected state), and a staged one finished by another
// thread `delay` later while the fit goes on; or dropped unfinished.
class StageAtStep : public Policy {
 public:
  StageAtStep(int64_t at, std::chrono::milliseconds delay, bool drop) : at_(at), delay_(delay), drop_(drop) {}
  std::string name() const override { return "stage_at_step"; }
  void on_fit_begin(const TrainingRun& run) override { run_ = &run; }
  void on_step_end(StepContext& ctx) override {
    if (!ctx.boundary() || ctx.state().step != at_) return;
    expected = std::make_shared<TrainingSnapshot>(run_->snapshot());
    auto staged = run_->staged_snapshot();
    if (drop_) return;
    copier = std::thread([this, staged, delay = delay_] {
      std::this_thread::sleep_for(delay);
      got = staged->finish();
    });
  }

  std::shared_ptr<TrainingSnapshot> expected, got;
  std::thread copier;

 private:
  const TrainingRun* run_ = nullptr;
  int64_t at_;
  std::chrono::milliseconds delay_;
  bool drop_;
};

void check_same_state(const TrainingSnapshot& expected, const TrainingSnapshot& got) {
  REQUIRE(got.state.step == expected.state.step);
  REQUIRE(got.tensors.size() == expected.tensors.size());
  for (const auto& [name, tensor] : expected.tensors) {
    INFO(name);
    REQUIRE(got.tensors.count(name) == 1);
    CHECK(got.tensors.at(name).device().is_cpu());
    CHECK(torch::equal(got.tensors.at(name), tensor));
  }
  CHECK(got.optimizer_bytes() == expected.optimizer_bytes());
}

void staged_copy_sees_its_step(const std::string& device) {
  torch::set_num_threads(1);
  const auto dir = scratch_dir("staged_snapshot_" + device);
  CheckpointedRun run = checkpointed_run(TrainerOptions().device(device).run_dir(dir.string()).max_epochs(10).max_steps(8),
                                         CheckpointOptions().at_end(false));
  auto stage = std::make_shared<StageAtStep>(3, std::chrono::milliseconds(300), /*drop=*/false);
  run.trainer->add_policy(stage);
  const auto started = std::chrono::steady_clock::now();
  run.trainer->fit();
  // Step 4's optimizer step waited for the copy that began 300 ms after step 3.
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(300));
  stage->copier.join();
  REQUIRE(stage->got);
  check_same_state(*stage->expected, *stage->got);
  // The run went on past it: the copy is of step 3, not of the weights at the end.
  const TrainingSnapshot end = run.trainer->snapshot();
  CHECK_FALSE(torch::equal(end.tensors.at("model/fc1.weight"), stage->got->tensors.at("model/fc1.weight")));
}

}  // namespace

TEST_CASE("a staged snapshot copied late, while the fit goes on, holds the weights and optimizer state of its step",
          "[checkpoint][staged]") {
  staged_copy_sees_its_step("cpu");
}

TEST_CASE("a staged snapshot dropped unfinished does not hold the run up, and finish copies once", "[checkpoint][staged]") {
  torch::set_num_threads(1);
  const auto dir = scratch_dir("staged_snapshot_dropped");
  CheckpointedRun run = checkpointed_run(TrainerOptions().device("cpu").run_dir(dir.string()).max_epochs(10).max_steps(6),
                                         CheckpointOptions().at_end(false));
  run.trainer->add_policy(std::make_shared<StageAtStep>(2, std::chrono::milliseconds(0), /*drop=*/true));
  CHECK(run.trainer->fit().state.step == 6);  // would wait forever for the dropped copy

  auto staged = run.trainer->staged_snapshot();
  const auto first = staged->finish();
  CHECK(staged->finish() == first);
  check_same_state(run.trainer->snapshot(), *first);
}

TEST_CASE("[gpu] a staged snapshot of a CUDA run, copied late on a side stream, holds its step", "[checkpoint][staged][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (the staged copy on a side stream)\n";
    return;
  }
  staged_copy_sees_its_step("cuda");
}
