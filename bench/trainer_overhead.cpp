// Overhead of the Trainer with all policies off against a hand-written LibTorch loop doing the
// same work (same model, data, batch order and optimizer), measured in one process with the two
// interleaved round by round so that machine noise hits both alike. Reports the median ratio.
//
//   build/bench/frugal_bench_overhead [results.jsonl] [rounds]

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "bench_result.hpp"
#include "frugal/frugal.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kExamples = 4096, kBatch = 64, kFeatures = 256, kHidden = 512, kClasses = 10;

torch::nn::Sequential make_model() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, kHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kHidden, kHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kHidden, kClasses));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& m) {
  return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
}

// Seconds per step of the hand-written loop: consecutive slices, no shuffling.
double hand_loop(const torch::Tensor& x, const torch::Tensor& y) {
  auto model = make_model();
  auto optimizer = make_optimizer(*model);
  const auto start = Clock::now();
  int64_t steps = 0;
  for (int64_t begin = 0; begin < kExamples; begin += kBatch, ++steps) {
    auto index = torch::arange(begin, begin + kBatch, torch::kLong);
    auto input = x.index_select(0, index), target = y.index_select(0, index);
    optimizer->zero_grad(true);
    auto loss = torch::cross_entropy_loss(model->forward(input), target);
    loss.backward();
    optimizer->step();
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(steps);
}

double trainer_loop(const std::shared_ptr<frugal::TensorDataset>& data) {
  auto model = make_model();
  frugal::Model wrapped(model.ptr(), frugal::LossFn<torch::nn::SequentialImpl>(
                                         [](torch::nn::SequentialImpl& m, const frugal::Batch& b) {
                                           return torch::cross_entropy_loss(m.forward(b.input), b.target);
                                         }));
  frugal::Trainer trainer(wrapped, make_optimizer, data,
                          frugal::TrainerOptions().device("cpu").run_dir("").log_every_n_steps(1000000),
                          frugal::DataLoaderOptions().batch_size(kBatch).shuffle(false));
  const auto start = Clock::now();
  auto result = trainer.fit();
  return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(result.state.step);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : "build/bench/results.jsonl";
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 15;
  frugal::log::set_level(frugal::log::Level::warn);
  torch::manual_seed(1);
  auto x = torch::randn({kExamples, kFeatures});
  auto y = torch::randint(0, kClasses, {kExamples});
  auto data = std::make_shared<frugal::TensorDataset>(x, y);
  hand_loop(x, y);  // warm-up: allocator, thread pool
  trainer_loop(data);

  std::vector<double> hand, trainer, ratios;
  for (int r = 0; r < rounds; ++r) {
    // Alternate which goes first so neither always runs on a warmer machine.
    double h, t;
    if (r % 2 == 0) {
      h = hand_loop(x, y);
      t = trainer_loop(data);
    } else {
      t = trainer_loop(data);
      h = hand_loop(x, y);
    }
    hand.push_back(h);
    trainer.push_back(t);
    ratios.push_back(t / h);
  }
  frugal::bench::Result result{"trainer_overhead_step_time", median(trainer) * 1e3, "ms/step", median(hand) * 1e3,
                               "bench/run (build/bench/frugal_bench_overhead)"};
  frugal::bench::append(out, result);
  std::cout << "median of per-round ratios " << median(ratios) << " over " << rounds << " rounds of "
            << kExamples / kBatch << " steps\n";
  return 0;
}
