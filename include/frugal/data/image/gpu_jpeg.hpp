#pragma once
// JPEG decoding on a CUDA GPU with nvJPEG, and the training / validation crops done there too.
// Batches are decoded together on the hardware JPEG engines of A100 / H100 / H200 where the
// library finds them, else by nvJPEG's GPU-hybrid backend. An image nvJPEG refuses (progressive
// for the engines, CMYK, anything it cannot parse) is decoded by libjpeg-turbo on the CPU and
// uploaded, so a corrupt JPEG gets exactly the CPU path's error. Every kernel and copy runs on
// the stream the caller passes, and the results must be used on it or after an event recorded
// on it (the loader does that for its workers). libnvjpeg is opened at run time: without it, or
// without a GPU, gpu_jpeg_available() says why and nothing else changes.
//
//   if (frugal::gpu_jpeg_available()) {
//     frugal::GpuJpegDecoder decoder(0);
//     auto images = decoder.decode({bytes_a, bytes_b}, {"a.jpg", "b.jpg"}, stream);   // uint8 [H, W, 3] on cuda:0
//     torch::Tensor batch = frugal::transform_images_gpu(images, boxes_and_flips, frugal::ImageTransformOptions());
//   }

#include <c10/core/Device.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/data/image/crop_box.hpp"
#include "frugal/data/image/transforms.hpp"

namespace frugal {

/// True when libnvjpeg loads and a CUDA device is present; otherwise false with `why` set.
bool gpu_jpeg_available(std::string* why = nullptr);

/// How the images of a GpuJpegDecoder were decoded, so far.
struct GpuJpegCounts {
  int64_t hardware = 0;  // batched on the JPEG engines
  int64_t gpu = 0;       // batched or one by one by the CUDA backend
  int64_t cpu = 0;       // refused by nvJPEG, decoded by libjpeg-turbo
};

struct GpuJpegOptions {
  /// Use the hardware engines when present (else the CUDA backend).
  TORCH_ARG(bool, hardware) = true;
  /// Decode a batch in one call; false: one call per image (the fallback path, also for tests).
  TORCH_ARG(bool, batched) = true;

 public:  // TORCH_ARG leaves the struct in private:
  bool operator==(const GpuJpegOptions&) const = default;
};

/// One thread's decoder on one device (nvJPEG's decode state is not thread-safe).
class GpuJpegDecoder {
 public:
  explicit GpuJpegDecoder(c10::DeviceIndex device, GpuJpegOptions options = {});
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;

  /// Each image as uint8 RGB [H, W, 3] on the device, decoded on `stream` (a cudaStream_t). A
  /// corrupt image throws the DataError the CPU decoder gives, naming where[i].
  std::vector<torch::Tensor> decode(const std::vector<std::string_view>& jpegs, const std::vector<std::string>& where, void* stream);

  bool uses_hardware() const;
  const GpuJpegCounts& counts() const { return counts_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  GpuJpegCounts counts_;
};

/// Crops, resizes (antialiased bilinear, in float, rounded) and flips each decoded image on its
/// device into one uint8 batch [N, 3, size, size], channels-last, on the current stream.
torch::Tensor transform_images_gpu(const std::vector<torch::Tensor>& images, const std::vector<ImageCrop>& crops, int64_t size);

}  // namespace frugal
