// fp16 loss scaling against torch.amp.GradScaler (tests/reference/grad_scaler_reference.py): the
// same sequence of scales and skipped steps, and the same final parameters, with injected inf/nan
// gradients; and the same again with clipping after unscaling.
#include <catch2/catch.hpp>

#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

// Sets weight.grad[0, 0] of the first layer to a scripted value in micro-steps 2, 5 and 6.
std::shared_ptr<Policy> inject_non_finite(const torch::nn::Sequential& model) {
  return std::make_shared<GradientInjection>(model->named_parameters()["0.weight"], [](int64_t micro_step, const torch::Tensor& grad) {
    const std::map<int64_t, double> script{{2, INFINITY}, {5, NAN}, {6, -INFINITY}};
    auto it = script.find(micro_step);
    if (it == script.end()) return grad;
    torch::Tensor changed = grad.clone();
    changed[0][0] = it->second;
    return changed;
  });
}

struct RecordScale : Policy {
  explicit RecordScale(const MixedPrecisionPolicy& p) : precision(p) {}
  std::string name() const override { return "record"; }
  void on_after_optimizer_step(StepContext& ctx) override {
    scales.push_back(precision.scaler().scale_value());
    skipped.push_back(ctx.step_cancelled());
  }
  const MixedPrecisionPolicy& precision;
  std::vector<double> scales;
  std::vector<bool> skipped;
};

struct Run {
  std::vector<double> scales;
  std::vector<bool> skipped;
  torch::Tensor params;
};

Run run_frugal(bool clip, bool scaling, bool stop_on_nonfinite = true) {
  torch::set_num_threads(1);
  torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 2));
  torch::manual_seed(0);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.copy_(torch::randn(p.sizes()) * 0.5);
  }
  auto x = torch::randn({12, 16, 4});
  auto y = torch::randn({12, 16, 2});
  auto data = std::make_shared<TensorDataset>(x.reshape({192, 4}), y.reshape({192, 2}));
  Model wrapped(model.ptr(), LossFn<torch::nn::SequentialImpl>([](torch::nn::SequentialImpl& m, const Batch& b) {
                  return torch::mse_loss(m.forward(b.input), b.target);
                }));
  Trainer trainer(wrapped,
                  [](torch::nn::Module& m) {
                    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
                  },
                  data, TrainerOptions().device("cpu").run_dir("").stop_on_nonfinite_loss(stop_on_nonfinite), DataLoaderOptions().batch_size(16).shuffle(false));
  auto precision = std::make_shared<MixedPrecisionPolicy>(
      MixedPrecisionOptions()
          .mode(scaling ? Precision::fp16 : Precision::fp32)
          .autocast(false)  // an fp32 model: the scaling arithmetic is what is compared
          .scaler(GradScalerOptions().init_scale(65536.0).growth_interval(3)));
  auto record = std::make_shared<RecordScale>(*precision);
  trainer.add_policy(inject_non_finite(model));
  trainer.add_policy(precision);
  if (clip) {
    trainer.add_policy(std::make_shared<GradientClippingPolicy>(
        GradientClippingOptions().mode(ClipMode::norm).max_norm(0.5)));
  }
  trainer.add_policy(record);
  trainer.fit();
  return {record->scales, record->skipped, flat_parameters(*model)};
}

void compare_with_python(bool clip) {
  const auto reference = run_python_reference("grad_scaler_reference.py", clip ? "clip" : "");
  const Run run = run_frugal(clip, /*scaling=*/true);
  CHECK(run.scales == reference["scales"].get<std::vector<double>>());
  CHECK(run.skipped == reference["skipped"].get<std::vector<bool>>());
  const auto expected = torch::tensor(reference["params"].get<std::vector<float>>());
  INFO("max abs diff " << (run.params - expected).abs().max().item<double>());
  CHECK(torch::allclose(run.params, expected, /*rtol=*/1e-6, /*atol=*/1e-7));
}

}  // namespace

TEST_CASE("fp16 loss scaling reproduces torch.amp.GradScaler's scales, skips and parameters", "[precision][parity][python]") {
  compare_with_python(/*clip=*/false);
}

TEST_CASE("with clipping after unscaling, too", "[precision][parity][python]") { compare_with_python(/*clip=*/true); }

TEST_CASE("without loss scaling the injected inf/nan would reach the weights", "[precision][parity]") {
  // The policy switched off (and the Trainer's own guard too): nothing is skipped and the
  // parameters end up non-finite. With the guard on, as by default, the run stops instead.
  CHECK_THROWS_AS(run_frugal(/*clip=*/false, /*scaling=*/false), NonFiniteError);
  const Run off = run_frugal(/*clip=*/false, /*scaling=*/false, /*stop_on_nonfinite=*/false);
  CHECK(off.scales == std::vector<double>(12, 65536.0));  // the scaler never ran
  CHECK(std::count(off.skipped.begin(), off.skipped.end(), true) == 0);
  CHECK_FALSE(torch::isfinite(off.params).all().item<bool>());
}
