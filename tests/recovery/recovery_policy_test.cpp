// The recovery ladder in process: rungs in order, the learning rate it lowers, the data it
// skips, its options' checks, and the same on CUDA ([gpu]).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <iostream>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

// 64 examples in batches of 8 (no shuffle): batch b holds examples 8b..8b+7; `nan_batches` get NaN inputs.
std::shared_ptr<TensorDataset> data_with_nan_batches(const std::vector<int64_t>& nan_batches) {
  auto base = blobs(64);
  Batch all = base->get_batch([] {
    std::vector<int64_t> i(64);
    for (int64_t k = 0; k < 64; ++k) i[k] = k;
    return i;
  }());
  torch::Tensor x = all.input.clone();
  for (int64_t b : nan_batches) x.slice(0, 8 * b, 8 * b + 8).fill_(std::nan(""));
  return std::make_shared<TensorDataset>(x, all.target);
}

struct Ladder {
  std::shared_ptr<RecoveryPolicy> recovery;
  FitResult result;
  double lr_at_end = 0.0;
  bool finite = true;
};

Ladder fit_with_ladder(const std::vector<int64_t>& nan_batches, const std::string& device, bool bf16) {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(0.1), data_with_nan_batches(nan_batches),
                  TrainerOptions().device(device).run_dir("").max_epochs(1).log_every_n_steps(1000),
                  DataLoaderOptions().batch_size(8).shuffle(false));
  if (bf16) trainer.add_policy(std::make_shared<MixedPrecisionPolicy>(MixedPrecisionOptions().mode(Precision::bf16)));
  Ladder out;
  out.recovery = std::make_shared<RecoveryPolicy>(RecoveryOptions().repeat_window(4).snapshot_every_n_steps(1).snapshots(2).lr_window(100));
  trainer.add_policy(out.recovery);
  out.result = trainer.fit();
  out.lr_at_end = trainer.optimizer().param_groups()[0].options().get_lr();
  for (const auto& p : net->parameters()) out.finite = out.finite && p.isfinite().all().item<bool>();
  return out;
}

}  // namespace

TEST_CASE("the recovery ladder skips, rolls back with the data skipped, then lowers the learning rate", "[recovery]") {
  const Ladder l = fit_with_ladder({3, 4, 5}, "cpu", false);
  REQUIRE(l.recovery->anomalies() == 3);
  REQUIRE(l.recovery->rollbacks() == 2);
  REQUIRE(l.recovery->decisions().size() == 3);
  CHECK_THAT(l.recovery->decisions()[0], Catch::Contains("rung 1 (skipped the step)"));
  CHECK_THAT(l.recovery->decisions()[1], Catch::Contains("rung 2"));
  CHECK_THAT(l.recovery->decisions()[2], Catch::Contains("rung 3"));
  CHECK_THAT(l.recovery->decisions()[2], Catch::Contains("learning rate x 0.5"));
  // Snapshots every step, 2 kept: at the 2nd anomaly (batch 4) they are of steps 2 and 3; the
  // oldest (step 2, read on from batch 2) is restored and batches 2-4 are skipped.
  REQUIRE(l.recovery->skipped_data().size() == 2);
  CHECK(l.recovery->skipped_data()[0].from_batch == 2);
  CHECK(l.recovery->skipped_data()[0].to_batch == 5);
  CHECK(l.recovery->skipped_data()[1].from_batch == 5);
  CHECK(l.recovery->skipped_data()[1].to_batch == 6);
  CHECK(l.lr_at_end == Approx(0.05));  // still inside rung 3's window
  CHECK(l.finite);
  // Back at step 2 twice, then batches 6 and 7 trained: the counters are those of that path.
  CHECK(l.result.state.step == 4);
}

TEST_CASE("without anomalies the ladder changes nothing", "[recovery]") {
  const Ladder clean = fit_with_ladder({}, "cpu", false);
  CHECK(clean.recovery->anomalies() == 0);
  CHECK(clean.recovery->rung() == 0);
  CHECK(clean.lr_at_end == Approx(0.1));
  CHECK(clean.result.state.step == 8);
}

TEST_CASE("recovery options are checked, naming the field", "[recovery]") {
  CHECK_THROWS_WITH(RecoveryOptions().lr_factor(2.0).validate(), Catch::Contains("lr_factor must be in (0, 1)"));
  CHECK_THROWS_WITH(RecoveryOptions().spike_factor(0.5).validate(), Catch::Contains("spike_factor must be > 1"));
  CHECK_THROWS_WITH(RecoveryOptions().min_history(60).validate(), Catch::Contains("min_history (60) must not exceed window (50)"));
  CHECK_THROWS_WITH(RecoveryOptions().snapshots(0).validate(), Catch::Contains("snapshots must be >= 1"));
}

TEST_CASE("the recovery ladder on CUDA in bf16: rungs in order, the switch to fp32, finite weights", "[recovery][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine\n";
    return;
  }
  const Ladder l = fit_with_ladder({3, 4, 5, 6}, "cuda", true);
  REQUIRE(l.recovery->decisions().size() == 4);
  CHECK_THAT(l.recovery->decisions()[3], Catch::Contains("rung 4"));
  CHECK_THAT(l.recovery->decisions()[3], Catch::Contains("precision bf16 -> fp32"));
  CHECK(l.recovery->rollbacks() == 3);
  CHECK(l.finite);
}
