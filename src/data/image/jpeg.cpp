#include "frugal/data/image/jpeg.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>
#include <turbojpeg.h>

#include <csetjmp>
#include <cstdio>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>

#include "data/image/detail/jpeg_scaling.hpp"
#include "data/image/detail/libjpeg_errors.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace {

// TurboJPEG handles are not thread-safe; one per thread and direction, made on first use.
struct Handle {
  tjhandle h;
  explicit Handle(tjhandle handle) : h(handle) {
    if (h == nullptr) throw Error(std::string("libjpeg-turbo: cannot create a handle: ") + tjGetErrorStr2(nullptr));
  }
  ~Handle() { tjDestroy(h); }
};

thread_local std::unique_ptr<Handle> decompressor_handle;

tjhandle decompressor() {
  if (!decompressor_handle) decompressor_handle = std::make_unique<Handle>(tjInitDecompress());
  return decompressor_handle->h;
}

// libjpeg-turbo 2.1 leaves a handle's state dirty after an error: the next header read then
// "succeeds" with a 0x0 image. A failed call therefore discards the thread's handle.
[[noreturn]] void fail(const std::string& where, const std::string& message) {
  decompressor_handle.reset();
  throw DataError(where, -1, message);
}

tjhandle compressor() {
  thread_local Handle handle(tjInitCompress());
  return handle.h;
}

std::string reason(tjhandle h) { return tjGetErrorStr2(h); }

}  // namespace

namespace {
// The header through libjpeg itself: TurboJPEG 2.1's header reader refuses what libjpeg decodes
// well (sampling factors such as 3x1 or 4:1:0, "Could not determine subsampling type"). False:
// err->message says why. No C++ object with a destructor between setjmp and the calls.
bool read_header(jpeg_decompress_struct* cinfo, detail::LibjpegErrors* err, const unsigned char* data, size_t size, JpegSize* out) {
  if (setjmp(err->jump) != 0) return false;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  out->width = static_cast<int>(cinfo->image_width);
  out->height = static_cast<int>(cinfo->image_height);
  out->cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  return true;
}
}  // namespace

JpegSize jpeg_size(std::string_view bytes, const std::string& where) {
  if (bytes.empty()) fail(where, "not a readable JPEG: the file is empty (0 bytes)");
  jpeg_decompress_struct cinfo{};
  detail::LibjpegErrors err{};
  detail::use_libjpeg_errors(reinterpret_cast<j_common_ptr>(&cinfo), &err);
  jpeg_create_decompress(&cinfo);
  JpegSize size;
  const bool ok = read_header(&cinfo, &err, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &size);
  jpeg_destroy_decompress(&cinfo);
  if (!ok) fail(where, std::string("not a readable JPEG: ") + err.message);
  if (size.width < 1 || size.height < 1) fail(where, "not a readable JPEG: it has no pixels (0 x 0)");
  return size;
}

namespace {
std::atomic<int64_t> max_pixels{89'478'485};  // Pillow's Image.MAX_IMAGE_PIXELS
}

void set_max_image_pixels(int64_t pixels) {
  if (pixels < 1) throw OptionError("max_image_pixels", c10::str("max_image_pixels must be >= 1, got ", pixels));
  max_pixels = pixels;
}

int64_t max_image_pixels() { return max_pixels; }

namespace detail {

DctScale fast_dct_scale(int width, int height, int min_width, int min_height) {
  DctScale best;
  if (min_width <= 0 && min_height <= 0) return best;
  int64_t best_pixels = int64_t{width} * height;
  for (const int denom : {2, 4, 8}) {
    const DctScale scale{1, denom};
    const int w = scaled_size(width, scale), h = scaled_size(height, scale);
    if (w >= min_width && h >= min_height && int64_t{w} * h < best_pixels) {
      best = scale;
      best_pixels = int64_t{w} * h;
    }
  }
  return best;
}

int scaled_size(int size, DctScale scale) { return static_cast<int>((int64_t{size} * scale.num + scale.denom - 1) / scale.denom); }

CropBox scale_box(const CropBox& box, int full_width, int full_height, int scaled_width, int scaled_height) {
  if (scaled_width == full_width && scaled_height == full_height) return box;
  const double sx = static_cast<double>(scaled_width) / full_width, sy = static_cast<double>(scaled_height) / full_height;
  const auto x0 = static_cast<int64_t>(std::floor(static_cast<double>(box.x) * sx));
  const auto y0 = static_cast<int64_t>(std::floor(static_cast<double>(box.y) * sy));
  const int64_t x1 = std::min<int64_t>(scaled_width, static_cast<int64_t>(std::ceil(static_cast<double>(box.x + box.width) * sx)));
  const int64_t y1 = std::min<int64_t>(scaled_height, static_cast<int64_t>(std::ceil(static_cast<double>(box.y + box.height) * sy)));
  return {x0, y0, std::max<int64_t>(1, x1 - x0), std::max<int64_t>(1, y1 - y0)};
}

std::string pixel_limit_problem(int width, int height) {
  // Checked before any allocation: a 631-byte file can claim 65500 x 65500 pixels (a decompression bomb).
  if (int64_t{width} * height <= max_pixels) return "";
  return c10::str("image of ", width, " x ", height, " pixels is above the limit of ", max_pixels.load(),
                  " (a decompression bomb?); raise it with frugal::set_max_image_pixels");
}

bool has_end_marker(const unsigned char* data, size_t size, size_t from) {
  for (size_t i = size; i >= from + 2; --i) {
    if (data[i - 2] == 0xFF && data[i - 1] == 0xD9) return true;
  }
  return false;
}

size_t first_scan_offset(const unsigned char* data, size_t size) {
  size_t at = 2;  // after SOI
  while (at + 4 <= size) {
    if (data[at] != 0xFF) return 0;
    const unsigned char marker = data[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without a length
      at += 2;
      continue;
    }
    const size_t length = (size_t{data[at + 2]} << 8) | data[at + 3];
    if (length < 2) return 0;
    if (marker == 0xDA) return std::min(size, at + 2 + length);
    at += 2 + length;
  }
  return 0;
}

// Pillow's Convert.c (cmyk2rgb on the values its "CMYK;I" raw mode gives): r = (255 - k) - c (255
// - k) / 255, rounded as its MULDIV255, with c and k as amounts of ink.
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int64_t pixels) {
  for (int64_t i = 0; i < pixels; ++i, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];  // 255 - k
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - cmyk[c]) * nk + 128;
      rgb[c] = static_cast<uint8_t>(std::clamp(nk - (((tmp >> 8) + tmp) >> 8), 0, 255));
    }
  }
}

}  // namespace detail

torch::Tensor decode_jpeg(std::string_view bytes, const std::string& where, int min_width, int min_height) {
  const JpegSize full = jpeg_size(bytes, where);
  if (const std::string problem = detail::pixel_limit_problem(full.width, full.height); !problem.empty()) fail(where, problem);
  const detail::DctScale scale = detail::fast_dct_scale(full.width, full.height, min_width, min_height);
  const int width = detail::scaled_size(full.width, scale), height = detail::scaled_size(full.height, scale);
  // CMYK and YCCK JPEGs (ImageNet has some) decode to CMYK, then to RGB as Pillow converts them.
  torch::Tensor out = torch::empty({height, width, full.cmyk ? 4 : 3}, torch::kUInt8);
  tjhandle h = decompressor();
  if (tjDecompress2(h, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()),
                    out.data_ptr<uint8_t>(), width, 0, height, full.cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_ACCURATEDCT) != 0) {
    // Warnings such as extraneous bytes before a marker are common in real photos and harmless
    // (Pillow accepts them too); a truncated image is not.
    const std::string why = reason(h);
    if (tjGetErrorCode(h) == TJERR_FATAL || why.find("Premature end") != std::string::npos) {
      fail(where, "corrupt JPEG: " + why);
    }
    decompressor_handle.reset();
  }
  if (full.cmyk) {
    torch::Tensor rgb = torch::empty({height, width, 3}, torch::kUInt8);
    detail::cmyk_to_rgb(out.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>(), int64_t{width} * height);
    return rgb;
  }
  return out;
}

std::string encode_jpeg(const torch::Tensor& image, int quality) {
  const bool grey = image.dim() == 2;
  if (image.scalar_type() != torch::kUInt8 || !(grey || (image.dim() == 3 && image.size(2) == 3))) {
    throw Error(c10::str("encode_jpeg: expects uint8 [H, W, 3] or [H, W], got ", image.scalar_type(), " ", image.sizes()));
  }
  if (quality < 1 || quality > 100) throw OptionError("quality", c10::str("JPEG quality must be in [1, 100], got ", quality));
  const torch::Tensor pixels = image.contiguous();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  tjhandle h = compressor();
  if (tjCompress2(h, pixels.data_ptr<uint8_t>(), static_cast<int>(pixels.size(1)), 0, static_cast<int>(pixels.size(0)),
                  grey ? TJPF_GRAY : TJPF_RGB, &buffer, &size, grey ? TJSAMP_GRAY : TJSAMP_420, quality,
                  TJFLAG_ACCURATEDCT) != 0) {
    tjFree(buffer);
    throw Error("libjpeg-turbo: cannot encode: " + reason(h));
  }
  std::string out(reinterpret_cast<const char*>(buffer), size);
  tjFree(buffer);
  return out;
}

}  // namespace frugal
