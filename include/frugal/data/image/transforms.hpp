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
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "frugal/data/image/crop_box.hpp"

namespace frugal {

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
  /// Decode at a reduced size (DCT scaling) when the crop allows it. Unset: on for training, off
  /// for validation, where every pixel is decoded as Pillow does, so that published torchvision
  /// accuracies reproduce exactly (with it, about 2.5 grey levels mean off torchvision's).
  TORCH_ARG(std::optional<bool>, dct_scaling) = std::nullopt;
  /// Decode only the rows and MCU columns the crop needs (decode_jpeg_region): the training crop,
  /// and the validation centre crop when DCT scaling is on (the exact validation path resizes the
  /// whole image, so it decodes it whole).
  TORCH_ARG(bool, roi_decode) = true;

 public:  // TORCH_ARG leaves the struct in private:
  /// DCT scaling as it applies: the option if set, else on for training only.
  bool uses_dct_scaling() const { return dct_scaling().value_or(train()); }
  /// Throws OptionError naming the bad field and value.
  void validate() const;
};

/// One image's crop as decode_and_transform chooses it from the header's size and the seed.
struct ImageCrop {
  /// The box in the image's pixels; for validation's exact path, in the resized image's pixels.
  CropBox box;
  bool flip = false;
  /// Validation's exact path: the whole image is resized to resized_width x resized_height
  /// first, then `box` is cut. 0: `box` of the image is resized to the output directly.
  int64_t resized_width = 0;
  int64_t resized_height = 0;
  /// DCT scaling: the smallest whole-image size the decode may reduce to (0: every pixel).
  int min_width = 0;
  int min_height = 0;
};

/// The crop of a width x height image for `seed`: RandomResizedCrop and a flip for training, the
/// centre crop for validation. CPU and GPU paths both use it, so they see the same crops.
ImageCrop plan_image_crop(int64_t width, int64_t height, const ImageTransformOptions& options, uint64_t seed);

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
