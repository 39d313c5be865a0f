// Early stopping: patience, min_delta, mode, thresholds, non-finite values, the grace period,
// and its counters across a checkpoint resume.
#include <catch2/catch.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {
// Feeds `values` as successive validations; returns the 1-based evaluation that stopped, or 0.
int stops_after(EarlyStoppingPolicy& policy, const std::vector<double>& values, const std::string& metric = "loss") {
  TrainerState state;
  for (size_t i = 0; i < values.size(); ++i) {
    state.step = static_cast<int64_t>(i);
    policy.on_validation_end(state, {{metric, values[i]}});
    if (policy.should_stop(state)) return static_cast<int>(i + 1);
  }
  return 0;
}
}  // namespace

TEST_CASE("patience counts evaluations without an improvement larger than min_delta", "[checkpoint][early_stopping]") {
  EarlyStoppingPolicy three(EarlyStoppingOptions().patience(3));
  CHECK(stops_after(three, {1.0, 0.9, 0.95, 0.92, 0.91, 0.5}) == 5);
  EarlyStoppingPolicy delta(EarlyStoppingOptions().patience(2).min_delta(0.05));
  CHECK(stops_after(delta, {1.0, 0.97, 0.96, 0.5}) == 3);  // 0.03 and 0.04 are not improvements
  EarlyStoppingPolicy never(EarlyStoppingOptions().patience(3));
  CHECK(stops_after(never, {1.0, 0.9, 0.8, 0.7, 0.6, 0.5}) == 0);
  EarlyStoppingPolicy max(EarlyStoppingOptions().monitor("accuracy").mode(MonitorMode::max).patience(2));
  CHECK(stops_after(max, {0.5, 0.6, 0.55, 0.58}, "accuracy") == 4);
}

TEST_CASE("thresholds and non-finite values stop at once, unless in the grace period", "[checkpoint][early_stopping]") {
  EarlyStoppingPolicy good(EarlyStoppingOptions().stopping_threshold(0.1));
  CHECK(stops_after(good, {1.0, 0.5, 0.09}) == 3);
  EarlyStoppingPolicy diverged(EarlyStoppingOptions().divergence_threshold(10.0).patience(100));
  CHECK(stops_after(diverged, {1.0, 11.0}) == 2);
  EarlyStoppingPolicy nan{EarlyStoppingOptions()};
  CHECK(stops_after(nan, {1.0, std::nan("")}) == 2);
  EarlyStoppingPolicy grace(EarlyStoppingOptions().patience(1).grace_evaluations(3));
  CHECK(stops_after(grace, {1.0, 2.0, 3.0, 4.0, 5.0}) == 4);  // rising loss tolerated for 3 evaluations
  EarlyStoppingPolicy missing(EarlyStoppingOptions().monitor("f1"));
  TrainerState s;
  CHECK_THROWS_WITH(missing.on_validation_end(s, {{"loss", 1.0}}), Catch::Contains("'f1'") && Catch::Contains("loss"));
}

TEST_CASE("early stopping ends a fit with its reason and its counters survive a resume", "[checkpoint][early_stopping]") {
  Seeded seeded;
  const auto dir = scratch_dir("early_resume");
  // A validation set the model cannot learn: random labels, loss stagnates.
  auto noise = std::make_shared<TensorDataset>(torch::randn({32, 4}), torch::randint(0, 3, {32}));
  auto make = [&](int64_t max_steps) {
    auto trainer = std::make_unique<Trainer>(Model(TinyNet().ptr(), cross_entropy(), accuracy_and_loss()), sgd(0.0),
                                             blobs(32), TrainerOptions().device("cpu").run_dir(dir.string())
                                                            .max_epochs(50).max_steps(max_steps).validate_every_n_steps(2),
                                             DataLoaderOptions().batch_size(8));
    trainer->set_validation_data(noise);
    auto early = std::make_shared<EarlyStoppingPolicy>(EarlyStoppingOptions().patience(3));
    trainer->add_policy(early);
    add_checkpointing(*trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(2)));
    return std::make_pair(std::move(trainer), early);
  };
  // lr 0: the validation loss never changes, so evaluations 2, 3, 4 are not improvements.
  auto [a, early_a] = make(4);
  a->fit();
  CHECK(early_a->evaluations_without_improvement() == 1);
  auto [b, early_b] = make(100);
  auto result = b->fit();
  CHECK(early_b->evaluations_without_improvement() == 3);
  CHECK(result.state.step == 8);  // resumed at 4 with one miss counted: misses at 6 and 8 make 3
  CHECK_THAT(*result.state.stop_reason, Catch::Contains("early_stopping") && Catch::Contains("patience 3"));
}
