#pragma once
// The ResNet example's data: ImageNet-style JPEGs from tar shards or an image folder, decoded and
// augmented by worker threads, or synthetic images made on the training device for throughput
// measurements (no decoding, no host-to-device copy).

#include <filesystem>
#include <memory>
#include <string>

#include "frugal/frugal.hpp"

namespace resnet_example {

struct ImageDataOptions {
  std::string source = "shards";  // shards | folder | synthetic
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
  std::string decode = "auto";     // cpu | gpu (nvJPEG) | auto (gpu when training on CUDA and nvJPEG loads)
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
