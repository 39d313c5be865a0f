#include "frugal/data/image/gpu_jpeg.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/StringUtil.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <optional>

#include "data/image/detail/jpeg_scaling.hpp"
#include "data/image/detail/nvjpeg_library.hpp"
#include "frugal/data/image/jpeg.hpp"
#include "frugal/errors.hpp"

namespace frugal {

bool gpu_jpeg_available(std::string* why) {
  auto say = [why](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
#if FRUGAL_HAVE_NVJPEG
  if (!torch::cuda::is_available()) return say("no CUDA device");
  std::string problem;
  if (detail::nvjpeg(&problem) == nullptr) return say(problem);
  return true;
#else
  return say("this build of Frugal has no GPU JPEG decoder (nvjpeg.h was not found when it was configured)");
#endif
}

#if FRUGAL_HAVE_NVJPEG

namespace {

[[noreturn]] void fail(const std::string& what, nvjpegStatus_t status) {
  throw Error(c10::str("nvJPEG: ", what, ": ", detail::nvjpeg_status_name(status)));
}

void check(nvjpegStatus_t status, const char* what) {
  if (status != NVJPEG_STATUS_SUCCESS) fail(what, status);
}

}  // namespace

struct GpuJpegDecoder::State {
  const detail::NvJpeg* lib = nullptr;
  c10::DeviceIndex device = 0;
  GpuJpegOptions options;
  bool hardware = false;
  nvjpegHandle_t batch_handle = nullptr;  // the engines, or the CUDA backend
  nvjpegJpegState_t batch_state = nullptr;
  nvjpegHandle_t single_handle = nullptr;  // one image at a time (CUDA backend)
  nvjpegJpegState_t single_state = nullptr;
  nvjpegJpegStream_t parsed = nullptr;  // for the engines' support check
  int batch_size = -1;                  // what batch_state was initialised for

  ~State() {
    if (lib == nullptr) return;
    if (parsed != nullptr) lib->stream_destroy(parsed);
    if (batch_state != nullptr) lib->state_destroy(batch_state);
    if (single_state != nullptr) lib->state_destroy(single_state);
    if (batch_handle != nullptr && batch_handle != single_handle) lib->destroy(batch_handle);
    if (single_handle != nullptr) lib->destroy(single_handle);
  }
};

GpuJpegDecoder::GpuJpegDecoder(c10::DeviceIndex device, GpuJpegOptions options) : state_(std::make_unique<State>()) {
  std::string why;
  if (!gpu_jpeg_available(&why)) throw Error("GPU JPEG decoding is unavailable: " + why);
  State& s = *state_;
  s.lib = detail::nvjpeg();
  s.device = device;
  s.options = options;
  const c10::cuda::CUDAGuard guard(device);
  check(s.lib->create_ex(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &s.single_handle), "creating a handle");
  check(s.lib->state_create(s.single_handle, &s.single_state), "creating a decode state");
  // The hardware engines where the GPU has them (A100, H100, H200 ...); creating the handle fails
  // elsewhere, and the CUDA backend batches instead.
  if (options.hardware() && s.lib->create_ex(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &s.batch_handle) == NVJPEG_STATUS_SUCCESS) {
    s.hardware = true;
  } else if (s.lib->create_ex(NVJPEG_BACKEND_GPU_HYBRID, nullptr, nullptr, 0, &s.batch_handle) != NVJPEG_STATUS_SUCCESS) {
    s.batch_handle = s.single_handle;  // the default backend batches too
  }
  check(s.lib->state_create(s.batch_handle, &s.batch_state), "creating a batch decode state");
  check(s.lib->stream_create(s.batch_handle, &s.parsed), "creating a bitstream parser");
}

GpuJpegDecoder::~GpuJpegDecoder() = default;

bool GpuJpegDecoder::uses_hardware() const { return state_->hardware; }

std::vector<torch::Tensor> GpuJpegDecoder::decode(const std::vector<std::string_view>& jpegs, const std::vector<std::string>& where,
                                                  void* stream_pointer) {
  if (jpegs.size() != where.size()) throw Error("GpuJpegDecoder::decode: one name per image is needed");
  State& s = *state_;
  const c10::cuda::CUDAGuard guard(s.device);
  auto stream = static_cast<cudaStream_t>(stream_pointer);
  // Outputs are allocated for `stream`: the caching allocator then never hands their memory to
  // other work before what is queued on it has run.
  std::optional<c10::cuda::CUDAStreamGuard> on_stream;
  if (c10::cuda::getCurrentCUDAStream(s.device).stream() != stream) {
    on_stream.emplace(c10::cuda::getStreamFromExternal(stream, s.device));
  }
  const auto device = torch::Device(torch::kCUDA, s.device);
  std::vector<torch::Tensor> out(jpegs.size());
  std::vector<size_t> batch, one_by_one, on_cpu;
  for (size_t i = 0; i < jpegs.size(); ++i) {
    // The CPU decoder's checks first, so a bad file gets the same error on either path: not a
    // JPEG, too many pixels, or cut short (nvJPEG may decode a truncated scan without a word).
    const JpegSize size = jpeg_size(jpegs[i], where[i]);
    if (const std::string problem = detail::pixel_limit_problem(size.width, size.height); !problem.empty()) {
      throw DataError(where[i], -1, problem);
    }
    const auto* data = reinterpret_cast<const unsigned char*>(jpegs[i].data());
    const size_t scan = detail::first_scan_offset(data, jpegs[i].size());
    if (scan == 0 || !detail::has_end_marker(data, jpegs[i].size(), scan)) {
      on_cpu.push_back(i);  // the CPU decoder names what is wrong, or decodes what it can
      continue;
    }
    if (size.cmyk) {  // nvJPEG has no Adobe CMYK as Pillow converts it
      on_cpu.push_back(i);
      continue;
    }
    int components = 0;
    nvjpegChromaSubsampling_t subsampling{};
    int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
    if (s.lib->get_image_info(s.single_handle, data, jpegs[i].size(), &components, &subsampling, widths, heights) !=
            NVJPEG_STATUS_SUCCESS ||
        widths[0] != size.width || heights[0] != size.height) {
      on_cpu.push_back(i);
      continue;
    }
    out[i] = torch::empty({size.height, size.width, 3}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
    bool batchable = s.options.batched();
    if (batchable && s.hardware) {
      // The engines take baseline, single-scan JPEGs with most subsamplings; the rest go one by one.
      int unsupported = 1;
      batchable = s.lib->stream_parse(s.batch_handle, data, jpegs[i].size(), 0, 0, s.parsed) == NVJPEG_STATUS_SUCCESS &&
                  s.lib->batched_supported(s.batch_handle, s.parsed, &unsupported) == NVJPEG_STATUS_SUCCESS && unsupported == 0;
    }
    (batchable ? batch : one_by_one).push_back(i);
  }
  auto image_of = [](torch::Tensor& t) {
    nvjpegImage_t image{};
    image.channel[0] = t.data_ptr<uint8_t>();
    image.pitch[0] = static_cast<size_t>(t.size(1)) * 3;
    return image;
  };
  if (!batch.empty()) {
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> images;
    for (const size_t i : batch) {
      data.push_back(reinterpret_cast<const unsigned char*>(jpegs[i].data()));
      lengths.push_back(jpegs[i].size());
      images.push_back(image_of(out[i]));
    }
    const auto n = static_cast<int>(batch.size());
    nvjpegStatus_t status = NVJPEG_STATUS_SUCCESS;
    if (s.batch_size != n) {
      status = s.lib->batched_initialize(s.batch_handle, s.batch_state, n, 1, NVJPEG_OUTPUT_RGBI);
      s.batch_size = status == NVJPEG_STATUS_SUCCESS ? n : -1;
    }
    if (status == NVJPEG_STATUS_SUCCESS) {
      status = s.lib->decode_batched(s.batch_handle, s.batch_state, data.data(), lengths.data(), images.data(), stream);
    }
    if (status == NVJPEG_STATUS_SUCCESS) {
      (s.hardware ? counts_.hardware : counts_.gpu) += n;
    } else {
      s.batch_size = -1;  // a failed batch needs initialising again
      one_by_one.insert(one_by_one.end(), batch.begin(), batch.end());  // find the image it failed on
    }
  }
  for (const size_t i : one_by_one) {
    nvjpegImage_t image = image_of(out[i]);
    if (s.lib->decode(s.single_handle, s.single_state, reinterpret_cast<const unsigned char*>(jpegs[i].data()), jpegs[i].size(),
                      NVJPEG_OUTPUT_RGBI, &image, stream) == NVJPEG_STATUS_SUCCESS) {
      ++counts_.gpu;
    } else {
      on_cpu.push_back(i);
    }
  }
  for (const size_t i : on_cpu) {
    // libjpeg-turbo: decodes what nvJPEG refuses, and names a corrupt file as the CPU path does.
    const torch::Tensor host = decode_jpeg(jpegs[i], where[i]);
    out[i] = host.to(device, /*non_blocking=*/false);  // pageable memory: copied before this returns
    ++counts_.cpu;
  }
  return out;
}

#else  // built without nvjpeg.h

struct GpuJpegDecoder::State {};

GpuJpegDecoder::GpuJpegDecoder(c10::DeviceIndex /*device*/, GpuJpegOptions /*options*/) {
  std::string why;
  gpu_jpeg_available(&why);
  throw Error("GPU JPEG decoding is unavailable: " + why);
}
GpuJpegDecoder::~GpuJpegDecoder() = default;
bool GpuJpegDecoder::uses_hardware() const { return false; }
std::vector<torch::Tensor> GpuJpegDecoder::decode(const std::vector<std::string_view>&, const std::vector<std::string>&, void*) {
  throw Error("GPU JPEG decoding is unavailable in this build");
}

#endif

torch::Tensor transform_images_gpu(const std::vector<torch::Tensor>& images, const std::vector<ImageCrop>& crops, int64_t size) {
  if (images.empty() || images.size() != crops.size()) throw Error("transform_images_gpu: one crop per image is needed");
  const auto n = static_cast<int64_t>(images.size());
  torch::Tensor out = torch::empty({n, 3, size, size}, images.front().options().memory_format(torch::MemoryFormat::ChannelsLast));
  // Antialiased bilinear in float, as torchvision's Resize(antialias=True) on a tensor; rounded
  // to uint8 as its PIL path stores pixels.
  auto resize = [](const torch::Tensor& hwc, int64_t height, int64_t width) {
    const torch::Tensor nchw = hwc.unsqueeze(0).permute({0, 3, 1, 2}).to(torch::kFloat32);
    if (nchw.size(2) == height && nchw.size(3) == width) return nchw;
    return torch::_upsample_bilinear2d_aa(nchw, {height, width}, /*align_corners=*/false);
  };
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor& image = images[static_cast<size_t>(i)];
    const ImageCrop& crop = crops[static_cast<size_t>(i)];
    const CropBox& b = crop.box;
    torch::Tensor result;
    if (crop.resized_width > 0) {  // validation, exact: the whole image resized, then the centre cut
      result = resize(image, crop.resized_height, crop.resized_width).slice(2, b.y, b.y + b.height).slice(3, b.x, b.x + b.width);
    } else {
      result = resize(image.slice(0, b.y, b.y + b.height).slice(1, b.x, b.x + b.width), size, size);
    }
    if (crop.flip) result = result.flip({3});
    out.select(0, i).copy_(result.squeeze(0).round_().clamp_(0, 255));  // float → uint8 in the copy
  }
  return out;
}

}  // namespace frugal
