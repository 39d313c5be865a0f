// Clipping runs on unscaled gradients: with fp16 loss scaling the clipped norm is max_norm, not
// max_norm / scale; by-value clipping bounds every element.
#include <catch2/catch.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {
// Records the total gradient norm the optimizer is about to apply.
struct NormBeforeStep : Policy {
  std::string name() const override { return "norm_before_step"; }
  void before_optimizer_step(StepContext& ctx) override {
    std::vector<torch::Tensor> norms;
    for (const auto& p : ctx.module().parameters()) norms.push_back(p.grad().norm());
    norm.push_back(torch::stack(norms).norm().item<double>());
    max_abs.push_back(0.0);
    for (const auto& p : ctx.module().parameters()) max_abs.back() = std::max(max_abs.back(), p.grad().abs().max().item<double>());
  }
  std::vector<double> norm, max_abs;
};

std::shared_ptr<NormBeforeStep> run(std::vector<std::shared_ptr<Policy>> policies) {
  Seeded seeded;
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(32), TrainerOptions().device("cpu").run_dir(""),
                  DataLoaderOptions().batch_size(8));
  for (auto& p : policies) trainer.add_policy(p);
  auto probe = std::make_shared<NormBeforeStep>();
  trainer.add_policy(probe);
  trainer.fit();
  return probe;
}
}  // namespace

TEST_CASE("clipping by norm sees unscaled gradients, whatever order the policies were added in", "[precision][clipping]") {
  auto fp16 = [] {
    return std::make_shared<MixedPrecisionPolicy>(MixedPrecisionOptions().mode(Precision::fp16).autocast(false));
  };
  auto clip = [] {
    return std::make_shared<GradientClippingPolicy>(GradientClippingOptions().mode(ClipMode::norm).max_norm(0.01));
  };
  for (bool clip_first : {false, true}) {
    auto probe = clip_first ? run({clip(), fp16()}) : run({fp16(), clip()});
    REQUIRE(probe->norm.size() == 4);
    // Had clipping run on scaled gradients, the unscaled norm would be 0.01 / 65536.
    for (double n : probe->norm) CHECK(n == Approx(0.01).epsilon(1e-4));
  }
  auto unclipped = run({fp16()});
  for (double n : unclipped->norm) CHECK(n > 0.05);
}

TEST_CASE("clipping by value bounds every gradient element, and the norm is reported", "[precision][clipping]") {
  auto policy = std::make_shared<GradientClippingPolicy>(GradientClippingOptions().mode(ClipMode::value).max_value(1e-3));
  auto probe = run({policy});
  for (double m : probe->max_abs) CHECK(m <= static_cast<double>(1e-3f));  // clamped in float
  auto norm_policy = std::make_shared<GradientClippingPolicy>(GradientClippingOptions().mode(ClipMode::norm).max_norm(10.0));
  run({norm_policy});
  Metrics metrics;
  norm_policy->collect_metrics(metrics);
  CHECK(metrics.at("grad_norm") > 0.0);
  CHECK_THROWS_WITH(GradientClippingOptions().max_norm(0).validate(), "max_norm must be > 0, got 0");
}
