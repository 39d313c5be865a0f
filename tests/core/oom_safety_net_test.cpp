// The out-of-memory safety net (trainer.halve_batch_on_oom): a step that runs out of memory is
// run again at half the micro-batch with twice the accumulation steps, from the same data.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

// TinyNet's loss, "out of memory" on micro-batches above `limit` once `after` micro-steps have run
// (`limit` < 0: never): memory pressure that arrives mid-run.
struct PressureAfter {
  int64_t limit, after;
  std::shared_ptr<int64_t> micro_steps = std::make_shared<int64_t>(0);
  torch::Tensor operator()(TinyNetImpl& net, const Batch& b) const {
    TORCH_CHECK_WITH(OutOfMemoryError, limit < 0 || *micro_steps < after || b.size() <= limit,
                     "simulated: CUDA out of memory (batch ", b.size(), ")");
    ++*micro_steps;
    return torch::cross_entropy_loss(net.forward(b.input), b.target);
  }
};

struct Result {
  torch::Tensor weights;
  TrainerState state;
  int64_t batch_size = 0, accumulation = 0;
};

Result train(int64_t batch, int64_t steps, PressureAfter pressure, bool halve, const std::string& run_dir = "",
             int64_t max_steps = -1, bool checkpoint = false) {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), LossFn<TinyNetImpl>(pressure)), sgd(0.05), blobs(256),
                  TrainerOptions().max_epochs(2).max_steps(max_steps).device("cpu").run_dir(run_dir),
                  DataLoaderOptions().batch_size(batch).seed(5));
  auto accumulation = std::make_shared<GradientAccumulationPolicy>(GradientAccumulationOptions().steps(steps).halve_batch_on_oom(halve));
  trainer.add_policy(accumulation);
  if (checkpoint) add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(2)));
  const FitResult fit = trainer.fit();
  return {flat_parameters(*net), fit.state, trainer.data_options().batch_size(), accumulation->steps()};
}

}  // namespace

TEST_CASE("out of memory mid-run halves the micro-batch until it fits and keeps the effective batch", "[core][oom]") {
  const auto dir = scratch_dir("oom_halving");
  // 16 examples a step; from the 6th micro-step only micro-batches of 4 fit: 16 -> 8 -> 4.
  const Result halved = train(16, 1, PressureAfter{4, 5}, /*halve=*/true, dir.string());
  CHECK(halved.batch_size == 4);
  CHECK(halved.accumulation == 4);
  // The same optimizer steps on the same examples as a run that used 4 x 4 throughout.
  const Result reference = train(4, 4, PressureAfter{-1, 0}, /*halve=*/false);
  CHECK(halved.state.step == reference.state.step);
  CHECK(halved.state.step == 2 * 256 / 16);
  CHECK(halved.state.samples_seen == reference.state.samples_seen);
  CHECK(halved.state.micro_step == 5 + (32 - 5) * 4);  // 5 steps of one micro-batch, then 4 each
  CHECK(torch::allclose(halved.weights, reference.weights, 1e-5, 1e-6));
  // Logged and recorded twice: 16 -> 8, 8 -> 4.
  int events = 0;
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) events += nlohmann::json::parse(line)["event"] == "out_of_memory";
  CHECK(events == 2);
  CHECK_THAT(bytes_of(dir / "train.log"), Catch::Contains("every rank runs step 6 again with micro-batches of 8 (was 16)"));
}

TEST_CASE("a resumed run goes on with the micro-batch it had halved to", "[core][oom][checkpoint]") {
  const auto whole_dir = scratch_dir("oom_whole"), split_dir = scratch_dir("oom_split");
  const Result whole = train(16, 1, PressureAfter{4, 5}, true, whole_dir.string(), 20, true);
  const Result first = train(16, 1, PressureAfter{4, 5}, true, split_dir.string(), 10, true);
  CHECK(first.batch_size == 4);
  // Configured again with 16: the checkpoint's micro-batch and the accumulation to match win.
  const Result second = train(16, 1, PressureAfter{-1, 0}, true, split_dir.string(), 20, true);
  CHECK(second.batch_size == 4);
  CHECK(second.accumulation == 4);
  CHECK(second.state.step == 20);
  CHECK(torch::equal(second.weights, whole.weights));
}

TEST_CASE("without the safety net, or at a micro-batch of 1, the out-of-memory error stops the run", "[core][oom]") {
  CHECK_THROWS_AS(train(16, 1, PressureAfter{4, 5}, /*halve=*/false), c10::OutOfMemoryError);
  CHECK_THROWS_WITH(train(2, 1, PressureAfter{0, 3}, /*halve=*/true), Catch::Contains("nothing is left to halve"));
}
