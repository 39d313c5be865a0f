// The CPU smoke test: passes on a good model without touching it, catches and explains a shape
// mismatch, stops the real run in fail mode and lets it go on in warn mode.
#include <catch2/catch.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {
TrainerOptions cpu_options() { return TrainerOptions().device("cpu").run_dir("").log_every_n_steps(1000); }
SmokeTestOptions failing_mode() { return SmokeTestOptions().mode(SmokeTestMode::fail); }
}  // namespace

TEST_CASE("the smoke test passes on a good model and leaves its weights and the RNG untouched", "[core][smoke]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(32), cpu_options().max_steps(1),
                  DataLoaderOptions().batch_size(8));
  const auto weights = flat_parameters(*net);
  const auto rng_before = at::detail::getDefaultCPUGenerator().get_state();

  SmokeTestReport report = run_smoke_test(trainer, SmokeTestOptions().batches(3));
  INFO(report.to_string());
  CHECK(report.passed);
  CHECK(report.batches_run == 3);
  CHECK(report.step_ms > 0.0);
  CHECK(report.peak_rss_bytes > 0);
  CHECK(report.batch_shapes == std::vector<std::string>{"input [8, 4] Float", "target [8] Long"});
  CHECK(torch::equal(weights, flat_parameters(*net)));
  CHECK(torch::equal(rng_before, at::detail::getDefaultCPUGenerator().get_state()));
}

TEST_CASE("the smoke test catches a shape mismatch and names the module, op and shapes", "[core][smoke]") {
  Seeded seeded;
  TinyNet broken(4, 8, 3, /*fc2_in=*/12);  // fc1 gives 8 features, fc2 expects 12
  Trainer trainer(Model(broken.ptr(), cross_entropy()), sgd(), blobs(32), cpu_options(),
                  DataLoaderOptions().batch_size(8));
  SmokeTestReport report = run_smoke_test(trainer, SmokeTestOptions());
  INFO(report.to_string());
  CHECK_FALSE(report.passed);
  CHECK(report.phase == "forward");
  CHECK(report.batches_run == 0);
  CHECK_THAT(report.error, Catch::Contains("8x8") && Catch::Contains("12x3"));
  CHECK(report.failing_module == "fc2");
  CHECK_THAT(report.to_string(), Catch::Contains("parameter fc2.weight [3, 12] Float"));
  CHECK(report.batch_shapes.front() == "input [8, 4] Float");
}

TEST_CASE("in fail mode a failed smoke test stops the run before its first step", "[core][smoke]") {
  Seeded seeded;
  TinyNet broken(4, 8, 3, 12);
  const auto weights = flat_parameters(*broken);
  Trainer trainer(Model(broken.ptr(), cross_entropy()), sgd(), blobs(32), cpu_options(), DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<SmokeTestPolicy>(failing_mode()));
  try {
    trainer.fit();
    FAIL("fit should have thrown SmokeTestFailed");
  } catch (const SmokeTestFailed& e) {
    CHECK(e.report().failing_module == "fc2");
    CHECK_THAT(std::string(e.what()), Catch::Contains("smoke test FAILED in forward"));
  }
  CHECK(trainer.state().micro_step == 0);
  CHECK(torch::equal(weights, flat_parameters(*broken)));
}

TEST_CASE("in warn mode a failed smoke test is reported and the run goes on", "[core][smoke]") {
  Seeded seeded;
  TinyNet net;
  TinyNetImpl* real = net.get();
  // Fails only on the smoke test's copy, so the real run can proceed.
  LossFn<TinyNetImpl> loss = [real](TinyNetImpl& n, const Batch& b) {
    if (&n != real) throw std::runtime_error("copy-only failure");
    return torch::cross_entropy_loss(n.forward(b.input), b.target);
  };
  Trainer trainer(Model(net.ptr(), loss), sgd(), blobs(32), cpu_options(), DataLoaderOptions().batch_size(8));
  auto policy = std::make_shared<SmokeTestPolicy>(SmokeTestOptions().mode(SmokeTestMode::warn));
  trainer.add_policy(policy);
  auto result = trainer.fit();
  CHECK(policy->ran());
  CHECK_FALSE(policy->last_report().passed);
  CHECK(policy->last_report().error == "copy-only failure");
  CHECK(result.state.step == 4);
}

TEST_CASE("auto mode skips the smoke test when training on the CPU anyway", "[core][smoke]") {
  Seeded seeded;
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(16), cpu_options(), DataLoaderOptions().batch_size(8));
  auto policy = std::make_shared<SmokeTestPolicy>();
  trainer.add_policy(policy);
  trainer.fit();
  CHECK_FALSE(policy->ran());
}

namespace {
// Not Cloneable: copies need a factory.
struct PlainNet : torch::nn::Module {
  PlainNet() { fc = register_module("fc", torch::nn::Linear(4, 3)); }
  torch::nn::Linear fc{nullptr};
};
}  // namespace

TEST_CASE("a module that is not Cloneable needs a factory for its smoke-test copy", "[core][smoke]") {
  Seeded seeded;
  LossFn<PlainNet> loss = [](PlainNet& n, const Batch& b) { return torch::cross_entropy_loss(n.fc->forward(b.input), b.target); };
  auto net = std::make_shared<PlainNet>();
  Trainer without(Model(net, loss), sgd(), blobs(16), cpu_options(), DataLoaderOptions().batch_size(8));
  SmokeTestReport r1 = run_smoke_test(without, SmokeTestOptions());
  CHECK_FALSE(r1.passed);
  CHECK(r1.phase == "copy");
  CHECK_THAT(r1.error, Catch::Contains("torch::nn::Cloneable") && Catch::Contains("factory"));

  Trainer with(Model(net, loss, {}, std::function<std::shared_ptr<PlainNet>()>([] { return std::make_shared<PlainNet>(); })),
               sgd(), blobs(16), cpu_options(), DataLoaderOptions().batch_size(8));
  const auto weights = flat_parameters(*net);
  SmokeTestReport r2 = run_smoke_test(with, SmokeTestOptions());
  INFO(r2.to_string());
  CHECK(r2.passed);
  CHECK(torch::equal(weights, flat_parameters(*net)));
}
