#pragma once
// An image folder laid out as torchvision's ImageFolder expects (root/<class>/**/<image>), read
// file by file: classes in sorted name order are labels 0, 1, ...; images sorted by path within
// each class. Each image becomes a Sample keyed by its path relative to the root, with the bytes
// under its extension ("jpg" for .jpg/.jpeg) and the label under "cls", so the same decoder
// serves an image folder and the tar shards that `frugal-data convert --from imagefolder` makes.
//
//   auto data = std::make_shared<frugal::ImageFolderDataset>("imagenet/train", decode);
//   data->classes();  // {"n01440764", ...}

#include <atomic>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "frugal/data/dataset.hpp"
#include "frugal/data/sharded_dataset.hpp"
#include "frugal/data/tar_shard.hpp"

namespace frugal {

struct ImageFolderListing {
  std::vector<std::string> classes;
  std::vector<std::pair<std::filesystem::path, int64_t>> images;  // (file, label)
  std::vector<std::string> skipped;  // "path: reason" for files that are not images
};

/// Lists `root` in ImageFolder's order; DataError naming `root` if it has no classes or images.
ImageFolderListing list_image_folder(const std::filesystem::path& root);

class ImageFolderDataset : public Dataset {
 public:
  /// on_corrupt = skip: an image that fails to read or decode is left out of its batch, counted
  /// and logged, instead of stopping the run with a DataError naming it.
  ImageFolderDataset(std::filesystem::path root, SampleDecoder decode, OnCorrupt on_corrupt = OnCorrupt::error);

  int64_t size() const override { return static_cast<int64_t>(listing_.images.size()); }
  Batch get_batch(const std::vector<int64_t>& indices) const override { return fetch(indices, {}); }
  Batch fetch(const std::vector<int64_t>& indices, const FetchContext& context) const override;

  /// The raw sample at `index`: {"jpg" or its extension: bytes, "cls": label}.
  Sample read_sample(int64_t index) const;
  const std::vector<std::string>& classes() const { return listing_.classes; }
  int64_t samples_skipped() const { return samples_skipped_.load(); }

 private:
  std::filesystem::path root_;
  ImageFolderListing listing_;
  SampleDecoder decode_;
  OnCorrupt on_corrupt_;
  mutable std::atomic<int64_t> samples_skipped_{0};
};

}  // namespace frugal
