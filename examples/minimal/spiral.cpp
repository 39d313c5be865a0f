#include "spiral.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <numbers>

namespace minimal {

std::shared_ptr<frugal::TensorDataset> make_spirals(int64_t n, int64_t classes, double noise, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto labels = torch::randint(0, classes, {n}, gen, torch::kLong);
  auto radius = torch::rand({n}, gen);
  auto angle = radius * 3.0 * std::numbers::pi + labels.to(torch::kFloat) * (2.0 * std::numbers::pi / classes);
  auto points = torch::stack({radius * torch::cos(angle), radius * torch::sin(angle)}, 1);
  points += noise * torch::randn({n, 2}, gen);
  return std::make_shared<frugal::TensorDataset>(points, labels);
}

}  // namespace minimal
