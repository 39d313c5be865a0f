// scripts/plot_metrics.py turns a real run's metrics into PNG files.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "support/fixtures.hpp"
#include "support/source_dir.hpp"

using namespace frugal;
using namespace frugal::testing;

TEST_CASE("plot_metrics.py draws loss, learning rate, throughput, step split and cost", "[tooling][python]") {
  Seeded seeded;
  const auto dir = scratch_dir("plot_run");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy(), accuracy_and_loss()), sgd(), blobs(128),
                  TrainerOptions().max_epochs(2).log_every_n_steps(2).device("cpu").run_dir(dir.string()),
                  DataLoaderOptions().batch_size(8));
  trainer.set_validation_data(blobs(32, 9));
  trainer.add_policy(std::make_shared<CostPolicy>(CostOptions().price_per_device_hour(3)));
  trainer.fit();
  const std::string command = std::string(FRUGAL_TEST_PYTHON) + " " + frugal::testing::source_dir() + "/scripts/plot_metrics.py " +
                              dir.string() + " > " + (dir / "plot.out").string() + " 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  for (const char* name : {"loss", "learning_rate", "throughput", "step_split", "cost"}) {
    const std::string png = bytes_of(dir / "plots" / (std::string(name) + ".png"));
    INFO(name);
    REQUIRE(png.size() > 1000);
    CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  }
  CHECK_FALSE(std::filesystem::exists(dir / "plots" / "mfu.png"));  // no FLOPs estimate, no MFU plot
  // A run directory without metrics is an error naming the file.
  const auto empty = scratch_dir("plot_empty");
  const std::string bad = std::string(FRUGAL_TEST_PYTHON) + " " + frugal::testing::source_dir() + "/scripts/plot_metrics.py " +
                          empty.string() + " > " + (empty / "out.txt").string() + " 2>&1";
  CHECK(std::system(bad.c_str()) != 0);
  CHECK_THAT(bytes_of(empty / "out.txt"), Catch::Contains("metrics.jsonl does not exist"));
}
