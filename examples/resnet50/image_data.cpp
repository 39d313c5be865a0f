#include "image_data.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

namespace resnet_example {
namespace fs = std::filesystem;
namespace {

// Random uint8 images made once on the device and served by index: measures the model alone.
class SyntheticImages : public frugal::Dataset {
 public:
  SyntheticImages(int64_t size, int64_t side, int64_t classes, const torch::Device& device) : size_(size) {
    torch::Generator gen = at::detail::createCPUGenerator(0);
    pool_ = torch::randint(0, 256, {kPool, 3, side, side}, gen, torch::kUInt8).to(device);
    labels_ = torch::randint(0, classes, {kPool}, gen, torch::kInt64).to(device);
  }
  int64_t size() const override { return size_; }
  frugal::Batch get_batch(const std::vector<int64_t>& indices) const override {
    std::vector<int64_t> slots;
    slots.reserve(indices.size());
    for (const int64_t i : indices) slots.push_back(i % kPool);
    const torch::Tensor at = torch::tensor(slots, torch::kInt64).to(pool_.device());
    return {pool_.index_select(0, at).contiguous(torch::MemoryFormat::ChannelsLast), labels_.index_select(0, at), {}};
  }

 private:
  static constexpr int64_t kPool = 64;
  int64_t size_;
  torch::Tensor pool_, labels_;
};

frugal::SampleDecoder jpeg_decoder(const frugal::ImageTransformOptions& transform) {
  return [transform](const frugal::Sample& s, const frugal::SampleContext& context) {
    const auto jpg = s.fields.find("jpg");
    if (jpg == s.fields.end()) {
      throw frugal::DataError("sample '" + s.key + "'", -1, "has no .jpg field (the example reads JPEG images only)");
    }
    const std::string& cls = s.field("cls");
    int64_t label = 0;
    try {
      label = std::stoll(cls);
    } catch (const std::exception&) {
      throw frugal::DataError("sample '" + s.key + "'", -1, "its .cls field '" + cls + "' is not a class number");
    }
    // Shard keys carry no extension; image-folder keys are file paths that do.
    const std::string where = fs::path(s.key).has_extension() ? s.key : s.key + ".jpg";
    return frugal::Batch{frugal::decode_and_transform(jpg->second, where, transform, context.sample_seed()),
                         torch::tensor(label), {}};
  };
}

std::vector<std::string> classes_of_shards(const fs::path& dir) {
  const fs::path file = dir / "classes.json";
  std::ifstream in(file);
  if (!in) {
    throw frugal::DataError(file.string(), -1,
                            "missing: shards written by `frugal-data convert --from imagefolder` carry their class names here");
  }
  try {
    return nlohmann::json::parse(in).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw frugal::DataError(file.string(), -1, c10::str("is not a JSON list of class names: ", e.what()));
  }
}

// Labels are indices into the class list, so validation must use the training set's list.
void check_same_classes(const std::vector<std::string>& train, const std::vector<std::string>& val, const ImageDataOptions& o) {
  if (train != val) {
    throw frugal::DataError(o.val, -1, c10::str("has ", val.size(), " classes that differ from the ", train.size(), " of ",
                                                o.train, " (labels would not match)"));
  }
}

// images.decode: gpu needs CUDA, shards and libnvjpeg; auto takes the GPU when all are there.
bool decode_on_gpu(const ImageDataOptions& o, const torch::Device& device) {
  if (o.decode == DecodeOn::cpu || o.source == ImageSource::synthetic) return false;
  std::string why;
  if (!device.is_cuda()) {
    why = "training runs on " + device.str();
  } else if (o.source != ImageSource::shards) {
    why = "GPU decoding reads shards (frugal-data convert --from imagefolder), not " + frugal::to_string(o.source);
  } else if (frugal::gpu_jpeg_available(&why)) {
    frugal::log::info("images.decode: JPEGs decoded on " + device.str() + " with nvJPEG");
    return true;
  }
  if (o.decode == DecodeOn::gpu) throw frugal::OptionError("images.decode", "images.decode=gpu: " + why);
  if (device.is_cuda()) frugal::log::info("images.decode=auto: decoding on the CPU (" + why + ")");
  return false;
}

}  // namespace

ImageData open_image_data(const ImageDataOptions& o, const frugal::ShardedDatasetOptions& shards, const torch::Device& device) {
  if (o.source == ImageSource::synthetic) {
    return {std::make_shared<SyntheticImages>(o.synthetic_images, o.size, o.synthetic_classes, device), nullptr,
            o.synthetic_classes};
  }
  if (o.train.empty()) throw frugal::OptionError("images.train", "images.train: a directory is required for source " + frugal::to_string(o.source));
  const auto train_transform =
      frugal::ImageTransformOptions().size(o.size).train(true).min_scale(o.min_scale).flip(o.flip).dct_scaling(o.dct_scaling).roi_decode(o.roi_decode);
  const auto val_transform = frugal::ImageTransformOptions()
                                 .size(o.val_size > 0 ? o.val_size : o.size)
                                 .train(false)
                                 .center_fraction(o.center_fraction)
                                 .dct_scaling(o.val_dct_scaling)
                                 .roi_decode(o.roi_decode);
  train_transform.validate();
  val_transform.validate();
  ImageData data;
  data.gpu_decoding = decode_on_gpu(o, device);
  if (o.source == ImageSource::shards) {
    // On the GPU: shards read raw, crops planned on the CPU, decoded and cropped by nvJPEG there.
    auto open_shards = [&](const std::string& dir, const frugal::ImageTransformOptions& transform) -> std::shared_ptr<const frugal::Dataset> {
      if (!data.gpu_decoding) return std::make_shared<frugal::ShardedDataset>(fs::path(dir), jpeg_decoder(transform), shards);
      auto raw = std::make_shared<frugal::ShardedDataset>(fs::path(dir), frugal::raw_samples(), shards);
      return std::make_shared<frugal::GpuImageDataset>(raw, transform, device);
    };
    data.train = open_shards(o.train, train_transform);
    const std::vector<std::string> classes = classes_of_shards(o.train);
    data.classes = static_cast<int64_t>(classes.size());
    if (!o.val.empty()) {
      data.val = open_shards(o.val, val_transform);
      check_same_classes(classes, classes_of_shards(o.val), o);
    }
  } else {  // ImageSource::folder
    auto train = std::make_shared<frugal::ImageFolderDataset>(o.train, jpeg_decoder(train_transform), shards.on_corrupt());
    data.classes = static_cast<int64_t>(train->classes().size());
    data.train = train;
    if (!o.val.empty()) {
      auto val = std::make_shared<frugal::ImageFolderDataset>(o.val, jpeg_decoder(val_transform), shards.on_corrupt());
      check_same_classes(train->classes(), val->classes(), o);
      data.val = val;
    }
  }
  return data;
}

}  // namespace resnet_example
