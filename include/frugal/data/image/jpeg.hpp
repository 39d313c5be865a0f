#pragma once
// JPEG decoding and encoding with libjpeg-turbo (TurboJPEG API). Decoding can use the codec's
// DCT scaling (1/2, 1/4, 1/8) to produce a smaller image directly, far cheaper than
// decoding at full size and resizing, when the caller only needs `min_width` x `min_height`.
//
//   torch::Tensor rgb = frugal::decode_jpeg(bytes, "cat.jpg");            // uint8 [H, W, 3]
//   torch::Tensor small = frugal::decode_jpeg(bytes, "cat.jpg", 64, 64);  // >= 64x64, maybe 1/8 size
//   std::string again = frugal::encode_jpeg(rgb, 90);

#include <torch/types.h>

#include <string>
#include <string_view>

namespace frugal {

struct JpegSize {
  int width = 0;
  int height = 0;
  bool cmyk = false;  // CMYK or YCCK: decode_jpeg converts to RGB as Pillow does
};

/// The image's size from its header alone; DataError naming `where` if it is not a JPEG.
JpegSize jpeg_size(std::string_view bytes, const std::string& where);

/// Decodes to uint8 RGB [H, W, 3]. With a minimum size, the largest DCT scaling that keeps both
/// sides at least that big is used. A corrupt image throws DataError naming `where`.
torch::Tensor decode_jpeg(std::string_view bytes, const std::string& where, int min_width = 0, int min_height = 0);

/// The most pixels (width x height, by the header) an image may have; larger ones are refused by
/// decode_jpeg with a DataError naming the file, before anything is allocated. Default 89,478,485,
/// Pillow's Image.MAX_IMAGE_PIXELS; process-wide (worker threads included).
void set_max_image_pixels(int64_t pixels);
int64_t max_image_pixels();

/// Encodes uint8 RGB [H, W, 3] (or grey [H, W]) at `quality` (1-100), 4:2:0 chroma.
std::string encode_jpeg(const torch::Tensor& image, int quality = 90);

}  // namespace frugal
