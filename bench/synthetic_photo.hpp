#pragma once
// A photo-like test image: smooth colour regions plus texture, so its JPEG has the size and
// decoding cost of a real photo (an ImageNet image at 500x375 is ~110 KB), unlike flat synthetic
// images that compress to almost nothing.

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace frugal::bench {

/// uint8 [h, w, 3], fixed by `seed`.
inline torch::Tensor picture(uint64_t seed, int64_t h, int64_t w) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto coarse = torch::rand({1, 3, 12, 16}, gen) * 255;
  auto image = torch::nn::functional::interpolate(
      coarse, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{h, w}).mode(torch::kBilinear).align_corners(false));
  image = image + 20 * torch::randn(image.sizes(), gen);  // texture, so the JPEG has realistic size
  return image.squeeze(0).permute({1, 2, 0}).round().clamp(0, 255).to(torch::kUInt8).contiguous();
}

}  // namespace frugal::bench
