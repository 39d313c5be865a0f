// GPU check for mixed precision: step time of a transformer encoder block and a ResNet
// bottleneck block trained through the Trainer in fp32, fp16 (autocast + loss scaling) and bf16
// (autocast), the GPU synchronized around the timed steps. Ratios are against fp32, measured in
// the same process. Without a GPU it says so and exits 0.
//
//   build/bench/frugal_bench_gpu_precision [results.jsonl]

#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "../bench_result.hpp"
#include "frugal/frugal.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kWarmup = 5, kTimed = 30;

// The same device-resident batch for every step: the benchmark times compute, not data loading.
class RepeatedBatch : public frugal::Dataset {
 public:
  RepeatedBatch(torch::Tensor input, torch::Tensor target) : input_(std::move(input)), target_(std::move(target)) {}
  int64_t size() const override { return input_.size(0) * (kWarmup + kTimed); }
  frugal::Batch get_batch(const std::vector<int64_t>&) const override { return {input_, target_, {}}; }

 private:
  torch::Tensor input_, target_;
};

// Times the steps after the warm-up ones.
struct StepTimer : frugal::Policy {
  std::string name() const override { return "step_timer"; }
  void on_step_end(frugal::StepContext& ctx) override {
    if (ctx.state().step == kWarmup) {
      torch::cuda::synchronize();
      start = Clock::now();
    }
  }
  void on_fit_end(const frugal::TrainingRun&) override {
    torch::cuda::synchronize();
    seconds_per_step = std::chrono::duration<double>(Clock::now() - start).count() / kTimed;
  }
  Clock::time_point start;
  double seconds_per_step = 0.0;
};

template <class Net>
double seconds_per_step(std::shared_ptr<Net> net, frugal::LossFn<Net> loss, torch::Tensor input, torch::Tensor target,
                        frugal::Precision precision) {
  const int64_t batch = input.size(0);
  frugal::Trainer trainer(frugal::Model(net, loss), [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  }, std::make_shared<RepeatedBatch>(input, target),
     frugal::TrainerOptions().device("cuda").run_dir("").max_steps(kWarmup + kTimed).log_every_n_steps(1000),
     frugal::DataLoaderOptions().batch_size(batch).shuffle(false));
  trainer.add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(frugal::MixedPrecisionOptions().mode(precision)));
  auto timer = std::make_shared<StepTimer>();
  trainer.add_policy(timer);
  trainer.fit();
  return timer->seconds_per_step;
}

void compare(const std::string& name, const std::function<double(frugal::Precision)>& run, const std::string& out) {
  const double fp32 = run(frugal::Precision::fp32);
  for (auto [label, precision] : {std::pair{"fp16", frugal::Precision::fp16}, std::pair{"bf16", frugal::Precision::bf16}}) {
    const double t = run(precision);
    frugal::bench::append(out, {"gpu_" + name + "_" + label + "_step_time", t * 1e3, "ms/step (fp32 baseline)", fp32 * 1e3,
                                "bench/gpu/run.sh (build/gpu/bench/frugal_bench_gpu_precision)"});
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : "build/bench/results.jsonl";
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device; the GPU precision benchmark needs one\n";
    return 0;
  }
  frugal::log::set_level(frugal::log::Level::warn);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);

  // A BERT-large-sized encoder layer: d_model 1024, 16 heads, feed-forward 4096; 32 x 256 tokens.
  compare("transformer_block", [&](frugal::Precision p) {
    torch::manual_seed(0);
    torch::nn::TransformerEncoderLayer layer(
        torch::nn::TransformerEncoderLayerOptions(1024, 16).dim_feedforward(4096).dropout(0.0));
    frugal::LossFn<torch::nn::TransformerEncoderLayerImpl> loss = [](torch::nn::TransformerEncoderLayerImpl& l,
                                                                     const frugal::Batch& b) {
      return torch::mse_loss(l.forward(b.input.transpose(0, 1)).transpose(0, 1).to(torch::kFloat), b.target);
    };
    return seconds_per_step(layer.ptr(), loss, torch::randn({32, 256, 1024}, cuda), torch::randn({32, 256, 1024}, cuda), p);
  }, out);

  // A ResNet-50 bottleneck block (256 -> 64 -> 64 -> 256 channels) at 56 x 56, batch 64.
  compare("resnet_block", [&](frugal::Precision p) {
    torch::manual_seed(0);
    using namespace torch::nn;
    Sequential branch(Conv2d(Conv2dOptions(256, 64, 1).bias(false)), BatchNorm2d(64), ReLU(),
                      Conv2d(Conv2dOptions(64, 64, 3).padding(1).bias(false)), BatchNorm2d(64), ReLU(),
                      Conv2d(Conv2dOptions(64, 256, 1).bias(false)), BatchNorm2d(256));
    frugal::LossFn<SequentialImpl> loss = [](SequentialImpl& s, const frugal::Batch& b) {
      return torch::mse_loss(torch::relu(b.input + s.forward(b.input)).to(torch::kFloat), b.target);
    };
    return seconds_per_step(branch.ptr(), loss, torch::randn({64, 256, 56, 56}, cuda), torch::randn({64, 256, 56, 56}, cuda), p);
  }, out);
  return 0;
}
