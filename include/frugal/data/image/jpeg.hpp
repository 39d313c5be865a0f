#pragma once
// JPEG decoding and encoding with libjpeg-turbo (TurboJPEG API). Decoding can use the codec's
// DCT scaling (1/2, 1/4, 1/8) to produce a smaller image directly, far cheaper than
// decoding at full size and resizing, when the caller only needs `min_width` x `min_height`.
//
//   torch::Tensor rgb = frugal::decode_jpeg(bytes, "cat.jpg");            // uint8 [H, W, 3]
//   torch::Tensor small = frugal::decode_jpeg(bytes, "cat.jpg", 64, 64);  // >= 64x64, maybe 1/8 size
//   std::string again = frugal::encode_jpeg(rgb, 90);
//   frugal::DecodedRegion part = frugal::decode_jpeg_region(bytes, "cat.jpg", {40, 30, 200, 150}, 112, 84);

#include <torch/types.h>

#include <string>
#include <string_view>

#include "frugal/data/image/crop_box.hpp"

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

/// A region of a JPEG decoded on its own (decode_jpeg_region).
struct DecodedRegion {
  /// uint8 RGB [h, w, 3] at the chosen DCT scaling: the region and what was decoded around it
  /// (whole MCU columns, and up to one MCU more on each side; with restart markers, the whole MCU
  /// rows and columns of the cut). `region` says where the region lies in it.
  torch::Tensor image;
  /// The region asked for, in `image`'s pixels (scaled and widened to whole pixels).
  CropBox region;
  /// The whole image's size at the chosen scaling.
  int scaled_width = 0;
  int scaled_height = 0;
};

/// Decodes only what `region` (in the full image's pixels) needs. A JPEG with restart markers
/// (add_jpeg_restart_markers; frugal-data convert writes them) is cut at them first: only the
/// restart intervals around the region are entropy-decoded, and the region's pixels equal a
/// whole decode's exactly. Otherwise the data down to the region's last row must be
/// entropy-decoded, but rows above it are skipped without colour conversion or inverse DCT, rows
/// below are never read, and only the MCU columns it covers are transformed (libjpeg-turbo's
/// jpeg_skip_scanlines / jpeg_crop_scanline), one MCU wider on each side so that the upsampled
/// chroma at the region's edges sees its true neighbours. DCT scaling as decode_jpeg's (the whole image at
/// least min_width x min_height). Errors as decode_jpeg's, also for damage outside the region (a
/// file without its end marker is refused).
DecodedRegion decode_jpeg_region(std::string_view bytes, const std::string& where, const CropBox& region, int min_width = 0,
                                 int min_height = 0);

/// The most pixels (width x height, by the header) an image may have; larger ones are refused by
/// decode_jpeg with a DataError naming the file, before anything is allocated. Default 89,478,485,
/// Pillow's Image.MAX_IMAGE_PIXELS; process-wide (worker threads included).
void set_max_image_pixels(int64_t pixels);
int64_t max_image_pixels();

/// The same image, losslessly (the DCT coefficients are copied, the pixels decode identically),
/// with a restart marker after every `mcus_per_interval` MCUs and Huffman tables fitted to it:
/// decode_jpeg_region then entropy-decodes only what a region needs. A marker costs about 2.4 bytes
/// an MCU and the tables fitted to the image win some back: real photos grow 0.98x to 1.14x (1.05x
/// on the benchmark's 26; every 2 MCUs: 1.02x, at less speed; docs/data.md). A progressive JPEG
/// becomes sequential. Exif, ICC and comment markers are kept. A
/// corrupt JPEG (one libjpeg warns about) throws DataError naming `where`.
std::string add_jpeg_restart_markers(std::string_view bytes, const std::string& where, int mcus_per_interval = 1);

/// Encodes uint8 RGB [H, W, 3] (or grey [H, W]) at `quality` (1-100), 4:2:0 chroma.
std::string encode_jpeg(const torch::Tensor& image, int quality = 90);

}  // namespace frugal
