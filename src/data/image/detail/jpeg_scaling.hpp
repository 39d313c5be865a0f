#pragma once
// What the whole-image and the region JPEG decoders share: the choice of DCT scaling, the box of
// a crop in a scaled image's pixels, the pixel limit, and Pillow's CMYK to RGB conversion.

#include <cstddef>
#include <cstdint>
#include <string>

#include "frugal/data/image/crop_box.hpp"

namespace frugal::detail {

/// A DCT scaling factor num/denom of libjpeg-turbo's.
struct DctScale {
  int num = 1;
  int denom = 1;
};

/// The largest reduction among 1/2, 1/4 and 1/8 that keeps the image at least min_width x
/// min_height (1/1 when none does, or when both are 0). Only those three have SIMD inverse DCTs;
/// the other eighths (7/8, 3/4 ...) are plain C and decode slower than full size (measured: 447 vs
/// 517 img/s/core for ImageNet-sized crops).
DctScale fast_dct_scale(int width, int height, int min_width, int min_height);

/// A side of `size` pixels at `scale`, rounded up as libjpeg does (TJSCALED).
int scaled_size(int size, DctScale scale);

/// `box` of a full_width x full_height image in the pixels of the same image at scaled_width x
/// scaled_height, widened to whole pixels.
CropBox scale_box(const CropBox& box, int full_width, int full_height, int scaled_width, int scaled_height);

/// "" when width x height is within max_image_pixels(); otherwise why the image is refused.
std::string pixel_limit_problem(int width, int height);

/// Whether the JPEG has its end-of-image marker after byte `from` (the start of its entropy-coded
/// data, or 0): a decoder that stops early (a region, a GPU) would not see a truncated file
/// that a whole decode refuses. 0xFF 0xD9 cannot occur inside entropy-coded data (0xFF there is
/// always followed by 0x00 or a restart marker).
bool has_end_marker(const unsigned char* data, size_t size, size_t from);

/// Where the first scan's entropy-coded data starts (after the SOS segment), by walking the
/// marker segments from the start; 0 when the walk does not reach a scan.
size_t first_scan_offset(const unsigned char* data, size_t size);

/// Adobe's CMYK as stored (inverted: 255 = no ink) to RGB with Pillow's arithmetic.
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int64_t pixels);

}  // namespace frugal::detail
