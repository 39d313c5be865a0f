#pragma once
// Test images for the image tests: a photo-like picture and grey-level differences.

#include <torch/torch.h>

namespace frugal::testing {

/// A photo-like test image: smooth gradients and waves plus fine noise, uint8 [H, W, 3].
inline torch::Tensor test_image(int64_t width, int64_t height, uint64_t seed = 1) {
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  const torch::Tensor y = torch::linspace(0, 1, height).view({height, 1, 1});
  const torch::Tensor x = torch::linspace(0, 1, width).view({1, width, 1});
  const torch::Tensor phase = torch::tensor({0.0, 2.0, 4.0}).view({1, 1, 3});
  torch::Tensor image = 128 + 60 * torch::sin(9 * x + 5 * y + phase) + 40 * torch::cos(23 * x * y + phase) +
                        8 * torch::randn({height, width, 3}, gen);
  return image.clamp(0, 255).round().to(torch::kUInt8);
}

/// Mean absolute grey-level difference (on any devices).
inline double mean_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.cpu().to(torch::kFloat32) - b.cpu().to(torch::kFloat32)).abs().mean().item<double>();
}

inline double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.cpu().to(torch::kFloat32) - b.cpu().to(torch::kFloat32)).abs().max().item<double>();
}

}  // namespace frugal::testing
