#include "frugal/data/image/transforms.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "data/image/detail/jpeg_scaling.hpp"
#include "frugal/data/image/jpeg.hpp"
#include "frugal/errors.hpp"

namespace frugal {

CropBox random_resized_crop_box(int64_t width, int64_t height, std::mt19937_64& rng, double min_scale, double max_scale,
                                double min_ratio, double max_ratio) {
  const double area = static_cast<double>(width * height);
  std::uniform_real_distribution<double> scale(min_scale, max_scale);
  std::uniform_real_distribution<double> log_ratio(std::log(min_ratio), std::log(max_ratio));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * scale(rng);
    const double aspect = std::exp(log_ratio(rng));
    const auto w = static_cast<int64_t>(std::lround(std::sqrt(target_area * aspect)));
    const auto h = static_cast<int64_t>(std::lround(std::sqrt(target_area / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t y = std::uniform_int_distribution<int64_t>(0, height - h)(rng);
      const int64_t x = std::uniform_int_distribution<int64_t>(0, width - w)(rng);
      return {x, y, w, h};
    }
  }
  // Fallback: the whole image, trimmed to the nearest allowed aspect ratio.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < min_ratio) {
    h = std::lround(static_cast<double>(w) / min_ratio);
  } else if (in_ratio > max_ratio) {
    w = std::lround(static_cast<double>(h) * max_ratio);
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

ResizeCenterCrop resize_center_crop(int64_t width, int64_t height, int64_t resize, int64_t crop) {
  // torchvision's _compute_resized_output_size: the long side is int(resize * long / short).
  const bool portrait = width <= height;
  const int64_t shorter = portrait ? width : height, longer = portrait ? height : width;
  const auto resized_long = static_cast<int64_t>(static_cast<double>(resize) * static_cast<double>(longer) / static_cast<double>(shorter));
  ResizeCenterCrop out;
  out.resized_width = portrait ? resize : resized_long;
  out.resized_height = portrait ? resized_long : resize;
  // center_crop: int(round((size - crop) / 2.0)), Python rounding half to even (nearbyint's default).
  auto offset = [crop](int64_t size) { return static_cast<int64_t>(std::nearbyint(static_cast<double>(size - crop) / 2.0)); };
  const int64_t w = std::min(crop, out.resized_width), h = std::min(crop, out.resized_height);
  out.crop = {std::max<int64_t>(0, offset(out.resized_width)), std::max<int64_t>(0, offset(out.resized_height)), w, h};
  return out;
}

torch::Tensor crop_resize(const torch::Tensor& image, const CropBox& box, int64_t out_width, int64_t out_height) {
  if (image.dim() != 3 || image.scalar_type() != torch::kUInt8) {
    throw Error(c10::str("crop_resize: expects uint8 [H, W, C], got ", image.scalar_type(), " ", image.sizes()));
  }
  if (box.width < 1 || box.height < 1 || box.x < 0 || box.y < 0 || box.x + box.width > image.size(1) ||
      box.y + box.height > image.size(0)) {
    throw Error(c10::str("crop_resize: box (", box.x, ", ", box.y, ", ", box.width, "x", box.height, ") is outside the ",
                         image.size(1), "x", image.size(0), " image"));
  }
  const torch::Tensor crop = image.slice(0, box.y, box.y + box.height).slice(1, box.x, box.x + box.width);
  if (box.width == out_width && box.height == out_height) return crop.contiguous();
  // [1, C, H, W] with channels-last strides: ATen's uint8 antialiased bilinear kernel works on
  // this layout directly (no float conversion, no transposes). The batch dimension goes first so
  // that its stride makes the view channels-last contiguous: unsqueezed after the permute, the
  // view fails ATen's layout check and takes the generic kernel, 2.7x slower.
  const torch::Tensor nchw = crop.contiguous().unsqueeze(0).permute({0, 3, 1, 2});
  const torch::Tensor resized = torch::_upsample_bilinear2d_aa(nchw, {out_height, out_width}, /*align_corners=*/false);
  return resized.squeeze(0).permute({1, 2, 0}).contiguous();
}

torch::Tensor horizontal_flip(const torch::Tensor& image) { return image.flip({1}); }

void ImageTransformOptions::validate() const {
  if (size() < 1) throw OptionError("size", c10::str("size must be >= 1, got ", size()));
  if (!(min_scale() > 0.0 && min_scale() <= 1.0)) {
    throw OptionError("min_scale", c10::str("min_scale must be in (0, 1], got ", min_scale()));
  }
  if (!(center_fraction() > 0.0 && center_fraction() <= 1.0)) {
    throw OptionError("center_fraction", c10::str("center_fraction must be in (0, 1], got ", center_fraction()));
  }
}

ImageCrop plan_image_crop(int64_t width, int64_t height, const ImageTransformOptions& options, uint64_t seed) {
  ImageCrop crop;
  const int64_t out = options.size();
  if (options.train()) {
    std::mt19937_64 rng(seed);
    crop.box = random_resized_crop_box(width, height, rng, options.min_scale());
    crop.flip = options.flip() && (rng() & 1U) != 0;
    if (options.uses_dct_scaling()) {  // the decoded crop must keep at least out x out pixels
      crop.min_width = static_cast<int>((width * out + crop.box.width - 1) / crop.box.width);
      crop.min_height = static_cast<int>((height * out + crop.box.height - 1) / crop.box.height);
    }
    return crop;
  }
  // Validation: the whole image resized (shorter side size / center_fraction), then the centre crop.
  const int64_t resize = std::max<int64_t>(out, std::lround(static_cast<double>(out) / options.center_fraction()));
  const ResizeCenterCrop plan = resize_center_crop(width, height, resize, out);
  const CropBox& c = plan.crop;
  if (!options.uses_dct_scaling()) {  // exact: torchvision's pixels
    crop.box = c;
    crop.resized_width = plan.resized_width;
    crop.resized_height = plan.resized_height;
    return crop;
  }
  // Fast, approximate: the centre crop's box mapped back to the image, decoded at a reduced size
  // and resized to the output directly.
  crop.box = detail::scale_box(c, static_cast<int>(plan.resized_width), static_cast<int>(plan.resized_height), static_cast<int>(width),
                               static_cast<int>(height));
  crop.min_width = static_cast<int>(plan.resized_width);
  crop.min_height = static_cast<int>(plan.resized_height);
  return crop;
}

torch::Tensor decode_and_transform(std::string_view jpeg, const std::string& where, const ImageTransformOptions& options,
                                   uint64_t seed) {
  const JpegSize full = jpeg_size(jpeg, where);
  if (full.width < 1 || full.height < 1) throw DataError(where, -1, c10::str("JPEG header gives an empty image (", full.width, "x", full.height, ")"));
  const int64_t out = options.size();
  const ImageCrop crop = plan_image_crop(full.width, full.height, options, seed);
  torch::Tensor result;
  if (crop.resized_width > 0) {
    // Exact validation: every pixel decoded, the whole image resized, then cropped (resize >=
    // size: the resized image always holds the whole crop).
    const torch::Tensor image = decode_jpeg(jpeg, where);
    const torch::Tensor resized = crop_resize(image, {0, 0, image.size(1), image.size(0)}, crop.resized_width, crop.resized_height);
    const CropBox& c = crop.box;
    result = resized.slice(0, c.y, c.y + c.height).slice(1, c.x, c.x + c.width).contiguous();
  } else if (options.roi_decode()) {
    const DecodedRegion decoded = decode_jpeg_region(jpeg, where, crop.box, crop.min_width, crop.min_height);
    result = crop_resize(decoded.image, decoded.region, out, out);
  } else {
    const torch::Tensor image = decode_jpeg(jpeg, where, crop.min_width, crop.min_height);
    const CropBox scaled = detail::scale_box(crop.box, full.width, full.height, static_cast<int>(image.size(1)), static_cast<int>(image.size(0)));
    result = crop_resize(image, scaled, out, out);
  }
  if (crop.flip) result = horizontal_flip(result);
  return result.permute({2, 0, 1});  // CHW view of HWC memory: stacking it gives a channels-last batch
}

namespace {

// The per-channel scale and shift, [1, 3, 1, 1] on `device`, made once per device and statistics:
// a tensor built from host values on a GPU is a synchronous copy, which would stall every step.
std::pair<torch::Tensor, torch::Tensor> normalization_constants(const torch::Device& device, const std::array<double, 3>& mean,
                                                                const std::array<double, 3>& std) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, std::array<double, 3>, std::array<double, 3>>, std::pair<torch::Tensor, torch::Tensor>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[{device.str(), mean, std}];
  if (!entry.first.defined()) {
    const torch::Tensor s = torch::tensor({std[0], std[1], std[2]}, torch::kFloat32);
    const torch::Tensor m = torch::tensor({mean[0], mean[1], mean[2]}, torch::kFloat32);
    entry = {(1.0 / (s * 255.0)).view({1, 3, 1, 1}).to(device), (-m / s).view({1, 3, 1, 1}).to(device)};
  }
  return entry;
}

}  // namespace

torch::Tensor normalize_images(const torch::Tensor& images, c10::MemoryFormat format, const std::array<double, 3>& mean,
                               const std::array<double, 3>& std) {
  if (images.dim() != 4 || images.size(1) != 3) {
    throw Error(c10::str("normalize_images: expects [N, 3, H, W], got ", images.sizes()));
  }
  const auto [scale, shift] = normalization_constants(images.device(), mean, std);
  return torch::addcmul(shift, images.to(torch::kFloat32), scale).contiguous(format);
}

}  // namespace frugal
