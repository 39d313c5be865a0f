#include "frugal/data/image_folder.hpp"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <set>

#include "base/durable_io.hpp"
#include "data/detail/decode_samples.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

ImageFolderListing list_image_folder(const fs::path& root) {
  // torchvision's IMG_EXTENSIONS that libjpeg-turbo or the converters handle.
  static const std::set<std::string> kImages{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".webp"};
  if (!fs::is_directory(root)) throw DataError(root.string(), -1, "is not a directory of class folders");
  ImageFolderListing listing;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) {
      listing.classes.push_back(entry.path().filename().string());
    } else {
      listing.skipped.push_back(entry.path().string() + ": a file beside the class folders");
    }
  }
  std::sort(listing.classes.begin(), listing.classes.end());
  if (listing.classes.empty()) throw DataError(root.string(), -1, "has no class subfolders");
  for (size_t label = 0; label < listing.classes.size(); ++label) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(root / listing.classes[label])) {
      if (!entry.is_regular_file()) continue;
      if (kImages.count(lower(entry.path().extension().string()))) {
        files.push_back(entry.path());
      } else {
        listing.skipped.push_back(entry.path().string() + ": not an image extension");
      }
    }
    // torchvision walks sorted(os.walk(class_dir)): directories in path order, each one's files
    // by name, so a class folder's own files come before those of its subfolders.
    std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
      return std::pair(a.parent_path().string(), a.filename().string()) < std::pair(b.parent_path().string(), b.filename().string());
    });
    for (auto& file : files) listing.images.emplace_back(std::move(file), static_cast<int64_t>(label));
  }
  if (listing.images.empty()) throw DataError(root.string(), -1, "its class folders hold no images");
  return listing;
}

ImageFolderDataset::ImageFolderDataset(fs::path root, SampleDecoder decode, OnCorrupt on_corrupt)
    : root_(std::move(root)), listing_(list_image_folder(root_)), decode_(std::move(decode)), on_corrupt_(on_corrupt) {
  if (!decode_) throw OptionError("decode", "ImageFolderDataset: a sample decoder is required");
}

Sample ImageFolderDataset::read_sample(int64_t index) const {
  if (index < 0 || index >= size()) throw OptionError("index", c10::str("sample index ", index, " is outside [0, ", size(), ")"));
  const auto& [file, label] = listing_.images[static_cast<size_t>(index)];
  std::string ext = lower(file.extension().string().substr(1));
  if (ext == "jpeg") ext = "jpg";
  std::string bytes;
  try {
    bytes = detail::read_file(file);
  } catch (const Error& e) {  // unreadable: a data problem, which on_corrupt governs
    throw DataError(file.string(), -1, e.what());
  }
  return {fs::relative(file, root_).string(), {{ext, std::move(bytes)}, {"cls", std::to_string(label)}}};
}

Batch ImageFolderDataset::fetch(const std::vector<int64_t>& indices, const FetchContext& context) const {
  return detail::decode_samples(
      indices, [this](int64_t index) { return read_sample(index); }, decode_, context, on_corrupt_, samples_skipped_);
}

}  // namespace frugal
