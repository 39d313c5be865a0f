// Mixed precision + gradient accumulation through Frugal's policies against a hand-written
// LibTorch loop doing the same work, interleaved in one process (CPU). Two cases:
//   bf16 autocast + accumulation 4                         (the CPU's mixed precision)
//   fp16 loss scaling + accumulation 4 + clipping by norm  (the GradScaler arithmetic, by hand
//                                                           with the same ATen kernels)
//
//   build/bench/frugal_bench_precision [results.jsonl] [rounds]

#include <iostream>

#include "bench_result.hpp"
#include "mlp_workload.hpp"

namespace {

using namespace frugal::bench;
constexpr int64_t kMicroBatch = 16, kAccumulate = 4;
constexpr int64_t kOptimizerSteps = kExamples / (kMicroBatch * kAccumulate);

double hand_bf16(const torch::Tensor& x, const torch::Tensor& y) {
  auto model = make_mlp();
  auto optimizer = make_sgd(*model);
  const double start = frugal::bench::thread_cpu_seconds();
  for (int64_t micro = 0; micro * kMicroBatch < kExamples; ++micro) {
    auto index = torch::arange(micro * kMicroBatch, (micro + 1) * kMicroBatch, torch::kLong);
    torch::Tensor loss;
    {
      frugal::AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
      loss = torch::cross_entropy_loss(model->forward(x.index_select(0, index)), y.index_select(0, index));
    }
    (loss / static_cast<double>(kAccumulate)).backward();
    if ((micro + 1) % kAccumulate == 0) {
      optimizer->step();
      optimizer->zero_grad(true);
    }
  }
  return (frugal::bench::thread_cpu_seconds() - start) / kOptimizerSteps;
}

double hand_fp16(const torch::Tensor& x, const torch::Tensor& y) {
  auto model = make_mlp();
  auto optimizer = make_sgd(*model);
  auto scale = torch::full({}, 65536.0f);
  auto tracker = torch::zeros({}, torch::kInt);
  auto params = model->parameters();
  const double start = frugal::bench::thread_cpu_seconds();
  for (int64_t micro = 0; micro * kMicroBatch < kExamples; ++micro) {
    auto index = torch::arange(micro * kMicroBatch, (micro + 1) * kMicroBatch, torch::kLong);
    auto loss = torch::cross_entropy_loss(model->forward(x.index_select(0, index)), y.index_select(0, index));
    (loss / static_cast<double>(kAccumulate) * scale).backward();
    if ((micro + 1) % kAccumulate != 0) continue;
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad());
    auto found_inf = torch::zeros({});
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, scale.to(torch::kDouble).reciprocal().to(torch::kFloat));
    if (found_inf.item<float>() == 0.0f) {
      torch::nn::utils::clip_grad_norm_(params, 1.0);
      optimizer->step();
    }
    at::_amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2000);
    optimizer->zero_grad(true);
  }
  return (frugal::bench::thread_cpu_seconds() - start) / kOptimizerSteps;
}

double frugal_run(const std::shared_ptr<frugal::TensorDataset>& data, bool fp16) {
  auto trainer = make_trainer(make_mlp(), data, kMicroBatch);
  trainer->add_policy(std::make_shared<frugal::GradientAccumulationPolicy>(
      frugal::GradientAccumulationOptions().steps(kAccumulate)));
  if (fp16) {
    trainer->add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(
        frugal::MixedPrecisionOptions().mode(frugal::Precision::fp16).autocast(false)));
    trainer->add_policy(std::make_shared<frugal::GradientClippingPolicy>(
        frugal::GradientClippingOptions().mode(frugal::ClipMode::norm).max_norm(1.0)));
  } else {
    trainer->add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(
        frugal::MixedPrecisionOptions().mode(frugal::Precision::bf16)));
  }
  return seconds_per_step(*trainer);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : "build/bench/results.jsonl";
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 11;
  const Workload w = make_workload();
  const auto& x = w.x;
  const auto& y = w.y;
  const auto& data = w.data;

  const auto bf16 = compare_interleaved(
      rounds, [&] { return hand_bf16(x, y); }, [&] { return frugal_run(data, false); });
  append(out, {"bf16_autocast_accumulation_step_time", bf16.candidate * 1e3, "ms/optimizer-step",
                              bf16.baseline * 1e3, "bench/run (build/bench/frugal_bench_precision)"});
  const auto fp16 = compare_interleaved(
      rounds, [&] { return hand_fp16(x, y); }, [&] { return frugal_run(data, true); });
  append(out, {"fp16_scaling_accumulation_clipping_step_time", fp16.candidate * 1e3,
                              "ms/optimizer-step", fp16.baseline * 1e3, "bench/run (build/bench/frugal_bench_precision)"});
  std::cout << "median per-round ratios: bf16 " << bf16.ratio << ", fp16 " << fp16.ratio << " over " << rounds
            << " rounds of " << kOptimizerSteps << " optimizer steps (x" << kAccumulate << " micro-batches)\n";
  return 0;
}
