#pragma once
// The image transforms of ImageNet-style training, computed the way torchvision's are, on uint8
// images [H, W, 3] as decode_jpeg returns them, plus the JPEG-aware entry point that decodes no
// more pixels than the crop needs: the crop is chosen from the header's size, then the image is
// decoded with the largest DCT scaling (1/2, 1/4, 1/8 ...) that still leaves the crop at least
// the output size. Randomness comes from a per-sample seed, so a batch's pixels depend on
// (seed, epoch, index) only and a resumed run sees the same crops.
//
//   auto options = frugal::ImageTransformOptions().size(224).train(true);
//   torch::Tensor chw = frugal::decode_and_transform(jpeg_bytes, "n01440764/x.JPEG", options, context.sample_seed());
//   ... on the device: frugal::normalize_images(batch.input)  // uint8 NCHW -> float, ImageNet mean/std

#include <torch/arg.h>
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace frugal {

/// A region of an image in pixels.
struct CropBox {
  int64_t x = 0;
  int64_t y = 0;
  int64_t width = 0;
  int64_t height = 0;
};

/// torchvision RandomResizedCrop.get_params: up to 10 tries of an area fraction in `scale` and a
/// log-uniform aspect ratio in `ratio`, then a centred crop of the nearest allowed ratio.
CropBox random_resized_crop_box(int64_t width, int64_t height, std::mt19937_64& rng, double min_scale = 0.08,
                                double max_scale = 1.0, double min_ratio = 3.0 / 4.0, double max_ratio = 4.0 / 3.0);

/// torchvision's Resize(resize) + CenterCrop(crop) on a width x height image: the size the whole
/// image is resized to (shorter side `resize`, the longer truncated as torchvision does) and the
/// crop box in the resized image (offsets rounded half to even, as Python's round()).
struct ResizeCenterCrop {
  int64_t resized_width = 0;
  int64_t resized_height = 0;
  CropBox crop;
};
ResizeCenterCrop resize_center_crop(int64_t width, int64_t height, int64_t resize, int64_t crop);

/// Crops `box` out of uint8 [H, W, 3] and resizes it to `out_width` x `out_height` with antialiased
/// bilinear interpolation (torchvision's Resize(antialias=True), close to Pillow's BILINEAR).
/// Returns uint8 [H', W', 3].
torch::Tensor crop_resize(const torch::Tensor& image, const CropBox& box, int64_t out_width, int64_t out_height);

/// Mirrors uint8 [H, W, C] left to right.
torch::Tensor horizontal_flip(const torch::Tensor& image);

struct ImageTransformOptions {
  /// Output side in pixels (square).
  TORCH_ARG(int64_t, size) = 224;
  /// true: RandomResizedCrop + random horizontal flip; false: torchvision's Resize(size /
  /// center_fraction) + CenterCrop(size), the whole image resized first as there.
  TORCH_ARG(bool, train) = true;
  /// RandomResizedCrop's smallest area fraction (torchvision 0.08; larger for small models).
  TORCH_ARG(double, min_scale) = 0.08;
  /// Validation: the centre crop's share of the resized shorter side (224/256).
  TORCH_ARG(double, center_fraction) = 0.875;
  TORCH_ARG(bool, flip) = true;
  /// Decode at a reduced size when the crop allows it. Off: every pixel decoded, as Pillow does,
  /// which validation wants to reproduce published torchvision accuracies exactly.
  TORCH_ARG(bool, dct_scaling) = true;

 public:
  /// Throws OptionError naming the bad field and value.
  void validate() const;
};

/// Decodes a JPEG and applies the training or validation transform; uint8 [3, size, size]. A
/// corrupt image throws DataError naming `where`.
torch::Tensor decode_and_transform(std::string_view jpeg, const std::string& where, const ImageTransformOptions& options,
                                   uint64_t seed);

/// ImageNet's channel statistics, in [0, 1] units.
constexpr std::array<double, 3> kImageNetMean{0.485, 0.456, 0.406};
constexpr std::array<double, 3> kImageNetStd{0.229, 0.224, 0.225};

/// uint8 [N, 3, H, W] (on any device) → float (x / 255 - mean) / std in `format`; meant to run on
/// the training device, so the host moves a quarter of the bytes.
torch::Tensor normalize_images(const torch::Tensor& images, c10::MemoryFormat format = c10::MemoryFormat::Contiguous,
                               const std::array<double, 3>& mean = kImageNetMean, const std::array<double, 3>& std = kImageNetStd);

}  // namespace frugal
