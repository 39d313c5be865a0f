// Progress: the bar's text on a terminal, plain progress lines elsewhere.
#include <catch2/catch.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

TEST_CASE("durations read as people write them", "[tooling][progress]") {
  CHECK(format_duration(0) == "0s");
  CHECK(format_duration(59.4) == "59s");
  CHECK(format_duration(245) == "4m05s");
  CHECK(format_duration(3720) == "1h02m");
  CHECK(format_duration(-3) == "0s");
}

TEST_CASE("the progress bar shows epoch, step, share, ETA, throughput and loss", "[tooling][progress]") {
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().max_epochs(2).device("cpu").run_dir(""), DataLoaderOptions().batch_size(8));
  auto progress = std::make_shared<ProgressPolicy>(ProgressOptions().force_terminal(true).refresh_seconds(1e-9));
  trainer.add_policy(progress);
  trainer.fit();
  // The last redraw: epoch 2 of 2, all 16 steps, the bar full.
  CHECK_THAT(progress->line(), Catch::StartsWith("epoch 2/2 step 16 [####################] 100% 0s left, ") &&
                                   Catch::Contains(" samples/s, loss "));
}

TEST_CASE("without a terminal, progress goes to the log as plain lines", "[tooling][progress]") {
  const auto dir = scratch_dir("progress_lines");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().max_epochs(1).log_every_n_steps(100).device("cpu").run_dir(dir.string()),
                  DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<ProgressPolicy>(ProgressOptions().log_every_seconds(1e-9)));
  trainer.fit();
  const std::string log = bytes_of(dir / "train.log");
  CHECK_THAT(log, Catch::Contains("progress: epoch 1/1 step 8 [####################] 100%"));
  CHECK_THAT(log, Catch::Contains("progress: epoch 1/1 step 1 [##..................] 12%"));
}
