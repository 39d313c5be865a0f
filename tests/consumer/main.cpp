// Trains a linear model for a few steps through an installed Frugal; prints the step count.
#include <frugal/frugal.hpp>
#include <torch/torch.h>

#include <iostream>

int main() {
  torch::manual_seed(0);
  auto data = std::make_shared<frugal::TensorDataset>(torch::randn({64, 3}), torch::randint(0, 2, {64}));
  torch::nn::Linear net(3, 2);
  frugal::Model model(net.ptr(), frugal::LossFn<torch::nn::LinearImpl>([](torch::nn::LinearImpl& n, const frugal::Batch& b) {
    return torch::cross_entropy_loss(n.forward(b.input), b.target);
  }));
  frugal::Trainer trainer(model, [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1));
  }, data, frugal::TrainerOptions().device("cpu").run_dir(""), frugal::DataLoaderOptions().batch_size(16));
  auto result = trainer.fit();
  std::cout << "consumer steps " << result.state.step << "\n";
  return result.state.step == 4 ? 0 : 1;
}
