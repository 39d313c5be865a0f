// The fp16 loss-scale floor: by default a clear error; with fallback, the run continues in bf16
// and says so. The scaler's state survives a save/load.
#include <catch2/catch.hpp>

#include <fstream>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {
// Every micro-step's gradient of the first parameter is infinite.
std::shared_ptr<Policy> always_overflow(const torch::nn::Module& net) {
  return std::make_shared<GradientInjection>(net.parameters().front(),
                                             [](int64_t, const torch::Tensor& grad) { return torch::full_like(grad, INFINITY); });
}

MixedPrecisionOptions tiny_scale(ScaleFloorAction action) {
  return MixedPrecisionOptions()
      .mode(Precision::fp16)
      .autocast(false)
      .scaler(GradScalerOptions().init_scale(4.0))
      .min_scale(2.0)
      .on_min_scale(action);
}
}  // namespace

TEST_CASE("a loss scale below the floor stops the run with a clear error by default", "[precision][overflow]") {
  Seeded seeded;
  TinyNet net;
  const auto initial = flat_parameters(*net);
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(64), TrainerOptions().device("cpu").run_dir(""),
                  DataLoaderOptions().batch_size(8));
  trainer.add_policy(always_overflow(*net));
  trainer.add_policy(std::make_shared<MixedPrecisionPolicy>(tiny_scale(ScaleFloorAction::error)));
  CHECK_THROWS_WITH(trainer.fit(), Catch::Contains("fp16 loss scale fell to 1") &&
                                       Catch::Contains("precision.min_scale=2") && Catch::Contains("2 overflow steps"));
  CHECK(trainer.state().skipped_steps == 2);
  CHECK(torch::equal(initial, flat_parameters(*net)));  // skipped steps never touched the weights
}

TEST_CASE("with fallback the run continues in bf16 and records it", "[precision][overflow]") {
  Seeded seeded;
  const auto dir = scratch_dir("fallback");
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().device("cpu").run_dir(dir.string()).log_every_n_steps(8), DataLoaderOptions().batch_size(8));
  // Overflow only while fp16 is on: the fallback ends it.
  auto precision = std::make_shared<MixedPrecisionPolicy>(tiny_scale(ScaleFloorAction::fallback));
  const MixedPrecisionPolicy& policy = *precision;
  trainer.add_policy(std::make_shared<GradientInjection>(net->parameters().front(), [&policy](int64_t, const torch::Tensor& grad) {
    return policy.precision() == Precision::fp16 ? torch::full_like(grad, INFINITY) : grad;
  }));
  trainer.add_policy(precision);
  auto result = trainer.fit();
  CHECK(precision->precision() == Precision::bf16);
  CHECK(result.state.step == 8);
  CHECK(result.state.skipped_steps == 2);
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line) && line.find("\"event\":\"train\"") == std::string::npos) {
  }
  CHECK_THAT(line, Catch::Contains("\"precision_fallback\":1.0") && Catch::Contains("\"overflow_steps\":2.0"));
}

TEST_CASE("the scaler's state is saved and restored", "[precision][state]") {
  GradScaler a(GradScalerOptions().init_scale(1024).growth_interval(2));
  auto loss = torch::tensor(1.0f, torch::requires_grad());
  a.scale(loss);
  a.update(torch::zeros({}));
  a.update(torch::ones({}));  // overflow: 512, tracker 0
  a.update(torch::zeros({}));  // tracker 1
  StateDict state;
  a.save_state(state, "s.");
  GradScaler b(GradScalerOptions().init_scale(1024).growth_interval(2));
  b.load_state(state, "s.");
  CHECK(b.scale_value() == 512.0);
  b.update(torch::zeros({}));  // second clean step since the backoff: grows
  CHECK(b.scale_value() == 1024.0);
}
