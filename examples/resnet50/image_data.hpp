#pragma once
// The ResNet example's data: ImageNet-style JPEGs from tar shards or an image folder, decoded and
// augmented by worker threads, or synthetic images made on the training device for throughput
// measurements (no decoding, no host-to-device copy).

#include <array>
#include <filesystem>
#include <memory>
#include <string>

#include "frugal/frugal.hpp"

namespace resnet_example {

/// Where the images come from: tar shards, an ImageFolder tree, or made on the device.
enum class ImageSource { shards, folder, synthetic };
constexpr std::array<frugal::EnumName<ImageSource>, 3> names_of(ImageSource) {
  return {{{ImageSource::shards, "shards"}, {ImageSource::folder, "folder"}, {ImageSource::synthetic, "synthetic"}}};
}
/// Where JPEGs are decoded: worker threads, nvJPEG on the training GPU, or the GPU when it can.
enum class DecodeOn { cpu, gpu, automatic };
constexpr std::array<frugal::EnumName<DecodeOn>, 3> names_of(DecodeOn) {
  return {{{DecodeOn::cpu, "cpu"}, {DecodeOn::gpu, "gpu"}, {DecodeOn::automatic, "auto"}}};
}

struct ImageDataOptions {
  ImageSource source = ImageSource::shards;
  std::string train;              // directory of shards or class folders
  std::string val;
  int64_t size = 224;             // training crop side
  int64_t val_size = 0;           // validation crop side; 0 = size
  double min_scale = 0.08;        // RandomResizedCrop's smallest area fraction
  double center_fraction = 0.875;  // validation: the centre crop's share of the shorter side
  bool flip = true;
  bool dct_scaling = true;         // training: decode at 1/2, 1/4, 1/8 size when the crop allows
  bool val_dct_scaling = false;    // validation: off, every pixel decoded as Pillow does (exact torchvision)
  bool roi_decode = true;          // decode only the crop's rows and MCU columns
  DecodeOn decode = DecodeOn::automatic;
  int64_t synthetic_images = 1281167;  // an ImageNet epoch
  int64_t synthetic_classes = 1000;
};

struct ImageData {
  std::shared_ptr<const frugal::Dataset> train;
  std::shared_ptr<const frugal::Dataset> val;  // null for synthetic data
  int64_t classes = 0;
  bool gpu_decoding = false;  // JPEGs decoded on the training GPU
};

/// Opens the sources `options` name; DataError / OptionError naming the path or key otherwise.
ImageData open_image_data(const ImageDataOptions& options, const frugal::ShardedDatasetOptions& shards,
                          const torch::Device& device);

}  // namespace resnet_example
