#pragma once
// The CPU benchmarks' shared workload: an MLP classifier (256 -> 512 -> 512 -> 10) on 4096
// random examples, SGD with momentum, LibTorch on one thread; and the Trainer around it.

#include <torch/torch.h>

#include <memory>

#include "frugal/frugal.hpp"
#include "interleaved.hpp"

namespace frugal::bench {

constexpr int64_t kExamples = 4096, kFeatures = 256, kHidden = 512, kClasses = 10;

inline torch::nn::Sequential make_mlp() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, kHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kHidden, kHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kHidden, kClasses));
}

inline std::unique_ptr<torch::optim::Optimizer> make_sgd(torch::nn::Module& m) {
  return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
}

struct Workload {
  torch::Tensor x, y;
  std::shared_ptr<TensorDataset> data;
};

/// The examples, with logging quiet and one LibTorch thread (less noise between interleaved runs).
inline Workload make_workload() {
  log::set_level(log::Level::warn);
  torch::set_num_threads(1);
  torch::manual_seed(1);
  Workload w{torch::randn({kExamples, kFeatures}), torch::randint(0, kClasses, {kExamples}), nullptr};
  w.data = std::make_shared<TensorDataset>(w.x, w.y);
  return w;
}

/// A Trainer over `model` with no policies, in file order, that never logs.
inline std::unique_ptr<Trainer> make_trainer(const torch::nn::Sequential& model, const std::shared_ptr<TensorDataset>& data,
                                             int64_t batch) {
  Model wrapped(model.ptr(), LossFn<torch::nn::SequentialImpl>([](torch::nn::SequentialImpl& m, const Batch& b) {
                  return torch::cross_entropy_loss(m.forward(b.input), b.target);
                }));
  return std::make_unique<Trainer>(wrapped, make_sgd, data,
                                   TrainerOptions().device("cpu").run_dir("").log_every_n_steps(1000000),
                                   DataLoaderOptions().batch_size(batch).shuffle(false));
}

/// Thread CPU seconds per optimizer step of one fit.
inline double seconds_per_step(Trainer& trainer) {
  const double start = thread_cpu_seconds();
  auto result = trainer.fit();
  return (thread_cpu_seconds() - start) / static_cast<double>(result.state.step);
}

}  // namespace frugal::bench
