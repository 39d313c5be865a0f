// Cost and budget on a synthetic clock: one optimizer step = one hour.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

// Advances the shared clock by an hour after each optimizer step.
struct HourPerStep : Policy {
  explicit HourPerStep(std::shared_ptr<double> clock) : clock(std::move(clock)) {}
  std::string name() const override { return "hour_per_step"; }
  void on_after_optimizer_step(StepContext& /*ctx*/) override { *clock += 3600.0; }
  std::shared_ptr<double> clock;
};

// Records the cost figures of each log line.
struct CostFigures : Policy {
  std::string name() const override { return "cost_figures"; }
  void collect_metrics(Metrics& metrics) override { seen.push_back(metrics); }
  std::vector<Metrics> seen;
};

std::vector<nlohmann::json> records(const std::filesystem::path& run_dir, const std::string& event) {
  std::vector<nlohmann::json> found;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["event"] == event) found.push_back(record);
  }
  return found;
}

struct Run {
  std::shared_ptr<double> clock = std::make_shared<double>(1000.0);
  std::shared_ptr<CostPolicy> cost;
  std::shared_ptr<CostFigures> figures = std::make_shared<CostFigures>();
  std::unique_ptr<Trainer> trainer;

  Run(const std::filesystem::path& dir, CostOptions options, bool checkpoint) {
    // 200 batches per epoch, max_steps 20: the run's progress is step / 20.
    trainer = std::make_unique<Trainer>(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(400),
                                        TrainerOptions().max_steps(20).log_every_n_steps(1).device("cpu").run_dir(dir.string()),
                                        DataLoaderOptions().batch_size(2));
    trainer->add_policy(std::make_shared<HourPerStep>(clock));
    // The CostPolicy's own clock reads the shared one; its figures are collected after it.
    cost = std::make_shared<CostPolicy>(options, [c = clock] { return *c; });
    trainer->add_policy(cost);
    trainer->add_policy(figures);
    if (checkpoint) add_checkpointing(*trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(0)));
  }
};

}  // namespace

TEST_CASE("cost so far, burn rate and projection follow the clock", "[tooling][cost]") {
  Seeded seeded;
  const auto dir = scratch_dir("cost_projection");
  Run run(dir, CostOptions().price_per_device_hour(0.5).devices(4), /*checkpoint=*/false);
  run.trainer->fit();
  REQUIRE(run.figures->seen.size() == 20);
  for (size_t i = 0; i < run.figures->seen.size(); ++i) {
    const double hours = static_cast<double>(i + 1);
    const Metrics& m = run.figures->seen[i];
    CHECK(m.at("burn_rate_per_hour") == Approx(2.0));
    CHECK(m.at("cost") == Approx(2.0 * hours));
    CHECK(m.at("projected_cost") == Approx(2.0 * 20));  // 20 steps of an hour at 2/hour
  }
  CHECK(run.cost->cost() == Approx(40.0));
  const auto epochs = records(dir, "cost");
  CHECK(epochs.empty());  // the run stopped at max_steps inside its first epoch
}

TEST_CASE("budget alerts fire once each and a hard budget stops with a checkpoint", "[tooling][cost]") {
  Seeded seeded;
  const auto dir = scratch_dir("cost_budget");
  CostOptions options = CostOptions().price_per_device_hour(2).devices(1).budget(10).alert_fractions("0.8, 0.5,1").hard_budget(12);
  {
    Run run(dir, options, /*checkpoint=*/true);
    const FitResult result = run.trainer->fit();
    // 2 per step: 12 reached at step 6.
    CHECK(result.state.step == 6);
    REQUIRE(result.state.stop_reason);
    CHECK_THAT(*result.state.stop_reason, Catch::Contains("hard budget reached"));
    const auto alerts = records(dir, "budget_alert");
    REQUIRE(alerts.size() == 3);
    CHECK(alerts[0]["fraction"] == 0.5);
    CHECK(alerts[0]["step"] == 3);  // 6 >= 5
    CHECK(alerts[1]["fraction"] == 0.8);
    CHECK(alerts[1]["step"] == 4);  // 8 >= 8
    CHECK(alerts[2]["fraction"] == 1.0);
    CHECK(alerts[2]["step"] == 5);
    CheckpointStore store(dir / "checkpoints");
    REQUIRE(store.latest());
    CHECK(store.list().back().step == 6);
  }
  {
    // Resumed with more money: the 12 already spent count, no alert repeats, stop at 16.
    Run resumed(dir, options.hard_budget(16), /*checkpoint=*/true);
    const FitResult result = resumed.trainer->fit();
    CHECK(result.state.step == 8);
    CHECK(resumed.cost->cost() == Approx(16.0));
    CHECK(records(dir, "budget_alert").size() == 3);
  }
}

TEST_CASE("cost options are checked", "[tooling][cost]") {
  CHECK_THROWS_WITH(CostOptions().price_per_device_hour(-1).validate(), Catch::Contains("price_per_device_hour must be >= 0"));
  CHECK_THROWS_WITH(CostOptions().budget(5).validate(), Catch::Contains("needs price_per_device_hour"));
  CHECK_THROWS_WITH(CostOptions().alert_fractions("0.5,x").validate(), Catch::Contains("alert_fractions") && Catch::Contains("0.5,x"));
  CHECK_THROWS_WITH(CostOptions().alert_fractions("0.5,-1").validate(), Catch::Contains("positive"));
  CHECK(CostOptions().alert_fractions("1, 0.25 ,0.5").fractions() == std::vector<double>{0.25, 0.5, 1.0});
}
