// Overhead of the Trainer with all policies off against a hand-written LibTorch loop doing the
// same work (same model, data, batch order and optimizer), measured in one process with the two
// interleaved round by round so that machine noise hits both alike. Reports the median ratio.
//
//   build/bench/frugal_bench_overhead [results.jsonl] [rounds]

#include <torch/torch.h>

#include <iostream>

#include "bench_result.hpp"
#include "interleaved.hpp"
#include "frugal/frugal.hpp"

namespace {

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
  const double start = frugal::bench::thread_cpu_seconds();
  int64_t steps = 0;
  for (int64_t begin = 0; begin < kExamples; begin += kBatch, ++steps) {
    auto index = torch::arange(begin, begin + kBatch, torch::kLong);
    auto input = x.index_select(0, index), target = y.index_select(0, index);
    optimizer->zero_grad(true);
    auto loss = torch::cross_entropy_loss(model->forward(input), target);
    loss.backward();
    optimizer->step();
  }
  return (frugal::bench::thread_cpu_seconds() - start) / static_cast<double>(steps);
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
  const double start = frugal::bench::thread_cpu_seconds();
  auto result = trainer.fit();
  return (frugal::bench::thread_cpu_seconds() - start) / static_cast<double>(result.state.step);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : "build/bench/results.jsonl";
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 15;
  frugal::log::set_level(frugal::log::Level::warn);
  torch::set_num_threads(1);  // one thread: less scheduling noise between the interleaved runs
  torch::manual_seed(1);
  auto x = torch::randn({kExamples, kFeatures});
  auto y = torch::randint(0, kClasses, {kExamples});
  auto data = std::make_shared<frugal::TensorDataset>(x, y);
  const auto c = frugal::bench::compare_interleaved(
      rounds, [&] { return hand_loop(x, y); }, [&] { return trainer_loop(data); });
  frugal::bench::append(out, {"trainer_overhead_step_time", c.candidate * 1e3, "ms/step", c.baseline * 1e3,
                              "bench/run (build/bench/frugal_bench_overhead)"});
  std::cout << "median of per-round ratios " << c.ratio << " over " << rounds << " rounds of "
            << kExamples / kBatch << " steps\n";
  return 0;
}
