#include "frugal/data/image/gpu_image_dataset.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>

#include "frugal/data/image/jpeg.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {

SampleDecoder raw_samples() {
  return [](const Sample& sample, const SampleContext&) -> Batch {
    throw Error("sample '" + sample.key + "': this dataset is read raw (GpuImageDataset decodes it); fetch() is not for it");
  };
}

GpuImageDataset::GpuImageDataset(std::shared_ptr<const ShardedDataset> shards, ImageTransformOptions transform, torch::Device device,
                                 GpuJpegOptions options, std::string image_field, std::string label_field)
    : shards_(std::move(shards)),
      transform_(std::move(transform)),
      device_(std::move(device)),
      options_(options),
      image_field_(std::move(image_field)),
      label_field_(std::move(label_field)) {
  if (!shards_) throw OptionError("shards", "GpuImageDataset: shards are required");
  transform_.validate();
  if (!device_.is_cuda()) throw OptionError("device", "GpuImageDataset decodes on a CUDA device, got " + device_.str());
  if (!device_.has_index()) device_ = torch::Device(torch::kCUDA, c10::cuda::current_device());
  std::string why;
  if (!gpu_jpeg_available(&why)) throw OptionError("images.decode", "GPU JPEG decoding is unavailable: " + why);
}

GpuImageDataset::~GpuImageDataset() = default;

std::unique_ptr<GpuJpegDecoder> GpuImageDataset::take_decoder() const {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      auto decoder = std::move(idle_.back());
      idle_.pop_back();
      return decoder;
    }
  }
  return std::make_unique<GpuJpegDecoder>(device_.index(), options_);
}

void GpuImageDataset::give_back(std::unique_ptr<GpuJpegDecoder> decoder) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(decoder));
}

GpuJpegCounts GpuImageDataset::counts() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  GpuJpegCounts total = retired_;
  for (const auto& d : idle_) {
    total.hardware += d->counts().hardware;
    total.gpu += d->counts().gpu;
    total.cpu += d->counts().cpu;
  }
  return total;
}

Batch GpuImageDataset::fetch(const std::vector<int64_t>& indices, const FetchContext& context) const {
  std::vector<Sample> samples;
  std::vector<int64_t> labels;
  std::vector<ImageCrop> crops;
  std::vector<std::string> where;
  std::vector<int64_t> kept;  // indices of the batch still in it
  auto located = [&](int64_t index, const std::string& message) {
    const auto [shard, offset] = shards_->location(index);
    return DataError(shard.string(), offset, "sample '" + shards_->key(index) + "': " + message);
  };
  auto drop_or_throw = [&](const DataError& error) {
    if (shards_->options().on_corrupt() == OnCorrupt::error) throw error;
    shards_->count_skipped();
    log::warn(c10::str("skipping a corrupt sample (data.on_corrupt = skip): ", error.what()));
  };
  for (const int64_t index : indices) {
    try {
      Sample sample = shards_->read_sample(index, context);
      const auto image = sample.fields.find(image_field_);
      if (image == sample.fields.end()) throw DataError("sample '" + sample.key + "'", -1, "has no ." + image_field_ + " field");
      const std::string& text = sample.field(label_field_);
      int64_t label = 0;
      try {
        label = std::stoll(text);
      } catch (const std::exception&) {
        throw DataError("sample '" + sample.key + "'", -1, "its ." + label_field_ + " field '" + text + "' is not a class number");
      }
      const JpegSize size = jpeg_size(image->second, sample.key + "." + image_field_);
      if (size.width < 1 || size.height < 1) throw DataError(sample.key, -1, "JPEG header gives an empty image");
      SampleContext sample_context{index, context.epoch, context.seed};
      crops.push_back(plan_image_crop(size.width, size.height, transform_, sample_context.sample_seed()));
      where.push_back(sample.key + "." + image_field_);
      labels.push_back(label);
      samples.push_back(std::move(sample));
      kept.push_back(index);
    } catch (const DataError& e) {
      drop_or_throw(located(index, e.what()));
    }
  }
  const c10::cuda::CUDAGuard guard(device_.index());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_.index());
  std::unique_ptr<GpuJpegDecoder> decoder = take_decoder();
  struct GiveBack {
    const GpuImageDataset& owner;
    std::unique_ptr<GpuJpegDecoder>& decoder;
    ~GiveBack() { owner.give_back(std::move(decoder)); }
  } give_back_on_exit{*this, decoder};
  std::vector<torch::Tensor> images;
  for (;;) {  // a corrupt image under on_corrupt = skip is left out, and the rest decoded again
    if (kept.empty()) throw DataError("batch", -1, "every sample of the batch was corrupt");
    std::vector<std::string_view> jpegs;
    for (const Sample& s : samples) jpegs.emplace_back(s.fields.at(image_field_));
    try {
      images = decoder->decode(jpegs, where, stream.stream());
      break;
    } catch (const DataError& e) {
      const auto bad = static_cast<size_t>(std::find(where.begin(), where.end(), e.file()) - where.begin());
      if (bad == where.size()) throw;
      drop_or_throw(located(kept[bad], e.what()));
      for (auto* v : {&kept, &labels}) v->erase(v->begin() + static_cast<std::ptrdiff_t>(bad));
      samples.erase(samples.begin() + static_cast<std::ptrdiff_t>(bad));
      crops.erase(crops.begin() + static_cast<std::ptrdiff_t>(bad));
      where.erase(where.begin() + static_cast<std::ptrdiff_t>(bad));
    }
  }
  Batch batch;
  batch.input = transform_images_gpu(images, crops, transform_.size());
  batch.target = torch::tensor(labels, torch::kInt64).to(device_, /*non_blocking=*/false);
  // The samples' bytes are freed when this returns; wait for the stream so that no decode still
  // reads them. In a worker this is the worker's own stream: only this batch's work is waited for.
  stream.synchronize();
  return batch;
}

}  // namespace frugal
