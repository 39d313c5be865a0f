// No silent NaN run: a non-finite training loss stops the run with the step and the last good
// checkpoint, no checkpoint is written from non-finite weights, the smoke test flags NaN data and
// a diverging learning rate, and the option turned off trains on as LibTorch alone would.
#include <catch2/catch.hpp>

#include <iostream>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

// blobs(n) with a NaN in example `row` (batches of 8, unshuffled: it lands in step row / 8 + 1).
std::shared_ptr<TensorDataset> blobs_with_nan(int64_t n, int64_t row) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto targets = torch::randint(0, 3, {n}, gen, torch::kLong);
  auto inputs = torch::randn({n, 4}, gen);
  inputs[row][1] = std::numeric_limits<float>::quiet_NaN();
  return std::make_shared<TensorDataset>(inputs, targets);
}

TrainerOptions options(const fs::path& dir = {}) {
  return TrainerOptions().device("cpu").run_dir(dir.string()).max_epochs(1).log_every_n_steps(1000);
}
DataLoaderOptions unshuffled() { return DataLoaderOptions().batch_size(8).shuffle(false); }

std::string error_of(Trainer& trainer) {
  try {
    trainer.fit();
  } catch (const NonFiniteError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a NaN in the data stops the run, naming the step, at the next log line", "[core][nonfinite]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs_with_nan(64, 20), options().log_every_n_steps(2), unshuffled());
  const std::string error = error_of(trainer);
  INFO(error);
  CHECK_THAT(error, Catch::Contains("a non-finite training loss (nan) at step 3"));
  CHECK_THAT(error, Catch::Contains("the run stops at the log line of step 4"));
  CHECK_THAT(error, Catch::Contains("no checkpoint was written before it"));
  CHECK(trainer.state().step == 4);
}

TEST_CASE("no checkpoint is written after a NaN: the error names the last good one", "[core][nonfinite][checkpoint]") {
  Seeded seeded;
  const fs::path dir = scratch_dir("nonfinite_checkpoint");
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs_with_nan(64, 20), options(dir), unshuffled());
  add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(2).async(false)));
  const std::string error = error_of(trainer);
  INFO(error);
  CHECK_THAT(error, Catch::Contains("a non-finite training loss (nan) at step 3"));
  CHECK_THAT(error, Catch::Contains("the checkpoint of step 4, not written"));
  CHECK_THAT(error, Catch::Contains("the last good checkpoint is " + (dir / "checkpoints" / "ckpt-000000002").string()));
  CHECK(fs::exists(dir / "checkpoints" / "ckpt-000000002"));
  CHECK_FALSE(fs::exists(dir / "checkpoints" / "ckpt-000000004"));
}

TEST_CASE("a learning rate that diverges stops the run by the end of the fit at the latest", "[core][nonfinite]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(1e30), blobs(64), options(), unshuffled());
  const std::string error = error_of(trainer);
  INFO(error);
  CHECK_THAT(error, Catch::Contains("a non-finite training loss (nan) at step 2"));
  CHECK_THAT(error, Catch::Contains("the log line of step 8"));  // the fit's last window
}

TEST_CASE("weights that are not finite are never checkpointed, even when the loss still was", "[core][nonfinite][checkpoint]") {
  // lr = inf: step 1's loss is finite, the update makes the weights NaN; the checkpoint right after
  // is the first to see it.
  Seeded seeded;
  const fs::path dir = scratch_dir("nonfinite_weights");
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(std::numeric_limits<double>::infinity()), blobs(64), options(dir),
                  unshuffled());
  add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(1).async(false)));
  const std::string error = error_of(trainer);
  INFO(error);
  CHECK_THAT(error, Catch::Contains("non-finite weights at step 1 (parameter fc1.weight)"));
  CHECK_THAT(error, Catch::Contains("the checkpoint of step 1, not written"));
  CHECK_FALSE(fs::exists(dir / "checkpoints" / "ckpt-000000001"));
}

TEST_CASE("an async checkpoint's writer refuses non-finite weights on its own copy: nothing is written, the run stops",
          "[core][nonfinite][checkpoint]") {
  Seeded seeded;
  const fs::path dir = scratch_dir("nonfinite_weights_async");
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(std::numeric_limits<double>::infinity()), blobs(64), options(dir),
                  unshuffled());
  add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(1).async(true)));
  const std::string error = error_of(trainer);
  INFO(error);
  // The writer's refusal of step 1, or the loss check of step 2's save: whichever comes first.
  CHECK_THAT(error, Catch::Contains("non-finite weights at step 1 (parameter fc1.weight)") ||
                        Catch::Contains("a non-finite training loss (nan) at step 2"));
  CHECK_THAT(error, Catch::Contains(", not written; no checkpoint was written before it"));
  CHECK(trainer.state().step <= 2);  // stopped at a hook soon after, not at the end of the fit
  if (fs::exists(dir / "checkpoints")) {
    for (const auto& entry : fs::directory_iterator(dir / "checkpoints")) {
      CHECK(entry.path().filename().string().rfind("ckpt-", 0) != 0);  // no checkpoint at all
    }
  }
}

TEST_CASE("the weights check: large finite weights whose sum overflows pass, one inf, -inf or NaN anywhere is named",
          "[core][nonfinite]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(64), options(), unshuffled());
  torch::NoGradGuard no_grad;
  net->fc2->weight.fill_(3e38f);  // finite, but its sum is not
  net->fc1->bias.fill_(-3e38f);
  CHECK_NOTHROW(trainer.check_finite("the test", /*weights=*/true));
  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    INFO(bad);
    net->fc1->weight.view(-1)[5] = bad;
    try {
      trainer.check_finite("the test", /*weights=*/true);
      FAIL("no error");
    } catch (const NonFiniteError& e) {
      CHECK_THAT(e.what(), Catch::Contains("non-finite weights at step 0 (parameter fc1.weight)"));
    }
    net->fc1->weight.view(-1)[5] = 0.0f;
  }
  net->fc2->weight.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();  // beside the overflowing sum
  CHECK_THROWS_WITH(trainer.check_finite("the test", /*weights=*/true), Catch::Contains("(parameter fc2.weight)"));
}

TEST_CASE("with stop_on_nonfinite_loss off the run trains on through the NaN", "[core][nonfinite]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs_with_nan(64, 20),
                  options().log_every_n_steps(2).stop_on_nonfinite_loss(false), unshuffled());
  const FitResult result = trainer.fit();
  CHECK(result.state.step == 8);
  CHECK(std::isnan(result.train_loss));
}

TEST_CASE("the smoke test flags a NaN loss and a learning rate that makes the weights non-finite", "[core][nonfinite][smoke]") {
  Seeded seeded;
  TinyNet net;
  {
    Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs_with_nan(64, 10), options(), unshuffled());
    const SmokeTestReport report = run_smoke_test(trainer, SmokeTestOptions().batches(2));
    INFO(report.to_string());
    CHECK_FALSE(report.passed);
    CHECK(report.phase == "forward");
    CHECK(report.batches_run == 1);
    CHECK_THAT(report.error, Catch::Contains("the loss of batch 1 is nan"));
  }
  {
    Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(std::numeric_limits<double>::infinity()), blobs(64), options(),
                    unshuffled());
    const SmokeTestReport report = run_smoke_test(trainer, SmokeTestOptions().batches(2));
    INFO(report.to_string());
    CHECK_FALSE(report.passed);
    CHECK(report.phase == "optimizer step");
    CHECK(report.failing_module == "fc1");
    CHECK_THAT(report.error, Catch::Contains("parameter fc1.weight is not finite after the optimizer step of batch 0"));
  }
}

TEST_CASE("on CUDA the watch stays on the device and still stops the run at the log line", "[core][nonfinite][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (the loss watch on device tensors)\n";
    return;
  }
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs_with_nan(64, 20), options().device("cuda").log_every_n_steps(2),
                  unshuffled());
  const std::string error = error_of(trainer);
  INFO(error);
  CHECK_THAT(error, Catch::Contains("a non-finite training loss (nan) at step 3"));
  CHECK_THAT(error, Catch::Contains("the run stops at the log line of step 4"));
}

TEST_CASE("a batch size that leaves no batch is an error before the first step, not a 0-step run", "[core][trainer]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(50), options(), DataLoaderOptions().batch_size(64).drop_last(true));
  CHECK_THROWS_WITH(trainer.fit(), Catch::Contains("no training batch: the training set has 50 examples") &&
                                       Catch::Contains("batches of 64") && Catch::Contains("with drop_last"));
  CHECK(trainer.state().step == 0);
}
