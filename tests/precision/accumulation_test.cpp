// Gradient accumulation: 8 micro-batches of 8 equal one batch of 64, with and without fp16 loss
// scaling; the effective batch size derives N; a partial window at the epoch's end steps.
#include <catch2/catch.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

TrainerOptions cpu() { return TrainerOptions().device("cpu").run_dir(""); }

// Trains a copy of `initial` for one epoch over 64 examples; returns the parameters.
torch::Tensor train(const TinyNet& initial, int64_t batch, std::vector<std::shared_ptr<Policy>> policies,
                    int64_t* steps = nullptr) {
  TinyNet net = std::dynamic_pointer_cast<TinyNetImpl>(initial->clone());
  Trainer trainer(Model(net.ptr(), cross_entropy()),
                  [](torch::nn::Module& m) {
                    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
                  },
                  blobs(64), cpu(), DataLoaderOptions().batch_size(batch).seed(3));
  for (auto& p : policies) trainer.add_policy(p);
  auto result = trainer.fit();
  if (steps) *steps = result.state.step;
  return flat_parameters(*net);
}

double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

std::shared_ptr<Policy> accumulate(int64_t n) {
  return std::make_shared<GradientAccumulationPolicy>(GradientAccumulationOptions().steps(n));
}

}  // namespace

TEST_CASE("8 micro-batches of 8 give the parameters of one batch of 64", "[precision][accumulation]") {
  Seeded seeded;
  TinyNet initial(4, 32, 3);
  int64_t big_steps = 0, accumulated_steps = 0, plain_steps = 0;
  const auto big = train(initial, 64, {}, &big_steps);
  const auto accumulated = train(initial, 8, {accumulate(8)}, &accumulated_steps);
  CHECK(big_steps == 1);
  CHECK(accumulated_steps == 1);
  CHECK(relative_error(accumulated, big) <= 1e-6);

  // With the policy off, 8 optimizer steps on batches of 8 land somewhere else.
  const auto plain = train(initial, 8, {}, &plain_steps);
  CHECK(plain_steps == 8);
  CHECK(relative_error(plain, big) > 1e-3);
}

TEST_CASE("accumulation gives the same parameters with fp16 loss scaling active", "[precision][accumulation]") {
  Seeded seeded;
  TinyNet initial(4, 32, 3);
  const auto big = train(initial, 64, {});
  auto scaling = std::make_shared<MixedPrecisionPolicy>(MixedPrecisionOptions().mode(Precision::fp16).autocast(false));
  const auto accumulated = train(initial, 8, {accumulate(8), scaling});
  CHECK(relative_error(accumulated, big) <= 1e-6);
  CHECK(scaling->overflow_steps() == 0);
}

TEST_CASE("an effective batch size derives the number of micro-batches", "[precision][accumulation]") {
  Seeded seeded;
  TinyNet initial(4, 32, 3);
  auto policy = std::make_shared<GradientAccumulationPolicy>(GradientAccumulationOptions().effective_batch_size(64));
  int64_t steps = 0;
  const auto accumulated = train(initial, 8, {policy}, &steps);
  CHECK(policy->steps() == 8);
  CHECK(steps == 1);
  CHECK(relative_error(accumulated, train(initial, 64, {})) <= 1e-6);
  CHECK(accumulation_steps_for(64, 8, 2) == 4);
  CHECK_THROWS_WITH(accumulation_steps_for(64, 12, 1),
                    "effective_batch_size 64 is not a multiple of micro-batch 12 x 1 replica(s) = 12");
}

TEST_CASE("a partial window at the end of an epoch still steps, and windows never span epochs", "[precision][accumulation]") {
  Seeded seeded;
  // 80 examples in batches of 8 = 10 micro-batches; N = 4: boundaries after 4, 8 and 10.
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(80), cpu().max_epochs(2),
                  DataLoaderOptions().batch_size(8));
  std::vector<bool> boundaries;
  struct Boundaries : Policy {
    explicit Boundaries(std::vector<bool>& b) : out(b) {}
    std::string name() const override { return "boundaries"; }
    void on_step_end(StepContext& ctx) override { out.push_back(ctx.boundary()); }
    std::vector<bool>& out;
  };
  trainer.add_policy(accumulate(4));
  trainer.add_policy(std::make_shared<Boundaries>(boundaries));
  auto result = trainer.fit();
  const std::vector<bool> epoch{false, false, false, true, false, false, false, true, false, true};
  std::vector<bool> expected = epoch;
  expected.insert(expected.end(), epoch.begin(), epoch.end());
  CHECK(boundaries == expected);
  CHECK(result.state.step == 6);
}
