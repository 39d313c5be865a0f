#pragma once
// JPEG shards decoded and transformed on a GPU. Each fetch reads the batch's raw samples, plans
// every crop on the CPU exactly as decode_and_transform would (same seeds, same boxes and
// flips), decodes the batch with nvJPEG (GpuJpegDecoder) and crops, resizes and flips it on the
// device: the batch arrives as uint8 [N, 3, S, S], channels-last, on the GPU, with int64 labels.
// In a loader worker the work runs on that worker's side stream, which the consumer waits on; a
// corrupt image is a DataError naming shard and byte offset, or a counted skip under
// data.on_corrupt = skip, as on the CPU path.
//
//   auto raw = std::make_shared<frugal::ShardedDataset>("shards/train", frugal::raw_samples());
//   auto data = std::make_shared<frugal::GpuImageDataset>(raw, frugal::ImageTransformOptions().size(224), torch::Device("cuda:0"));
//   frugal::DataLoader loader(data, frugal::DataLoaderOptions().batch_size(256).num_workers(4));

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/data/image/gpu_jpeg.hpp"
#include "frugal/data/image/transforms.hpp"
#include "frugal/data/sharded_dataset.hpp"

namespace frugal {

/// A decoder for a ShardedDataset that is only read raw (GpuImageDataset decodes itself).
SampleDecoder raw_samples();

class GpuImageDataset : public Dataset {
 public:
  /// `image_field` holds the JPEG, `label_field` the class number as text.
  GpuImageDataset(std::shared_ptr<const ShardedDataset> shards, ImageTransformOptions transform, torch::Device device,
                  GpuJpegOptions options = {}, std::string image_field = "jpg", std::string label_field = "cls");
  ~GpuImageDataset() override;

  int64_t size() const override { return shards_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override { return fetch(indices, {}); }
  Batch fetch(const std::vector<int64_t>& indices, const FetchContext& context) const override;
  std::vector<int64_t> shuffled_order(int64_t seed, int64_t epoch) const override { return shards_->shuffled_order(seed, epoch); }

  const ShardedDataset& shards() const { return *shards_; }
  /// How the images were decoded so far, over every worker's decoder.
  GpuJpegCounts counts() const;

 private:
  std::unique_ptr<GpuJpegDecoder> take_decoder() const;
  void give_back(std::unique_ptr<GpuJpegDecoder> decoder) const;

  std::shared_ptr<const ShardedDataset> shards_;
  ImageTransformOptions transform_;
  torch::Device device_;
  GpuJpegOptions options_;
  std::string image_field_, label_field_;
  // nvJPEG states are per thread: each fetch borrows a decoder and gives it back.
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<GpuJpegDecoder>> idle_;
  mutable GpuJpegCounts retired_;
};

}  // namespace frugal
