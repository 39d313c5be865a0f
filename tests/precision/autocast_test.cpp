// Autocast: bf16 on the CPU inside the guard and the policy's forward scope, fp32 outside;
// fp16 autocast on CUDA where a GPU exists.
#include <catch2/catch.hpp>

#include <ATen/autocast_mode.h>

#include <iostream>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

TEST_CASE("AutocastGuard runs autocast-eligible ops in bf16 inside and restores the state after", "[precision][autocast]") {
  auto a = torch::randn({4, 4});
  auto b = torch::randn({4, 4});
  CHECK(torch::mm(a, b).scalar_type() == torch::kFloat);
  {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16);
    CHECK(torch::mm(a, b).scalar_type() == torch::kBFloat16);
    CHECK((a + b).scalar_type() == torch::kFloat);  // not on the autocast list: unchanged
    {
      AutocastGuard inner(torch::kCPU, torch::kBFloat16);
      CHECK(torch::mm(a, b).scalar_type() == torch::kBFloat16);
    }
    CHECK(at::autocast::is_autocast_enabled(torch::kCPU));  // the inner guard restored, not disabled
  }
  CHECK_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  CHECK(torch::mm(a, b).scalar_type() == torch::kFloat);
}

namespace {
// Trains one epoch with the given precision and returns the dtypes the model's output had in
// training and in validation.
std::pair<std::set<c10::ScalarType>, std::set<c10::ScalarType>> output_dtypes(Precision precision) {
  Seeded seeded;
  std::set<c10::ScalarType> train, validate;
  LossFn<TinyNetImpl> loss = [&](TinyNetImpl& n, const Batch& b) {
    auto logits = n.forward(b.input);
    train.insert(logits.scalar_type());
    return torch::cross_entropy_loss(logits, b.target);
  };
  MetricsFn<TinyNetImpl> metrics = [&](TinyNetImpl& n, const Batch& b) {
    auto logits = n.forward(b.input);
    validate.insert(logits.scalar_type());
    return BatchMetrics{{"loss", torch::cross_entropy_loss(logits, b.target)}};
  };
  TinyNet net;
  Trainer trainer(Model(net.ptr(), loss, metrics), sgd(), blobs(32), TrainerOptions().device("cpu").run_dir(""),
                  DataLoaderOptions().batch_size(8));
  trainer.set_validation_data(blobs(16, 3));
  trainer.add_policy(std::make_shared<MixedPrecisionPolicy>(MixedPrecisionOptions().mode(precision)));
  trainer.fit();
  for (const auto& p : net->parameters()) CHECK(p.scalar_type() == torch::kFloat);  // master weights stay fp32
  CHECK_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  return {train, validate};
}
}  // namespace

TEST_CASE("the bf16 policy runs the forward pass in bf16 on the CPU, in training and validation", "[precision][autocast]") {
  auto [train, validate] = output_dtypes(Precision::bf16);
  CHECK(train == std::set<c10::ScalarType>{torch::kBFloat16});
  CHECK(validate == std::set<c10::ScalarType>{torch::kBFloat16});
  auto [train32, validate32] = output_dtypes(Precision::fp32);
  CHECK(train32 == std::set<c10::ScalarType>{torch::kFloat});
  CHECK(validate32 == std::set<c10::ScalarType>{torch::kFloat});
}

TEST_CASE("fp16 autocast on CUDA runs matmuls in fp16", "[precision][autocast][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (fp16 autocast is a GPU feature)\n";
    return;
  }
  auto a = torch::randn({8, 8}, torch::kCUDA);
  AutocastGuard guard(torch::kCUDA, torch::kHalf);
  CHECK(torch::mm(a, a).scalar_type() == torch::kHalf);
}
