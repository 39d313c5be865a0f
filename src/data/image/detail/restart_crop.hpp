#pragma once
// Cutting a JPEG at its restart markers: a sequential JPEG must be entropy-decoded from its start
// down to any row it shows (two thirds of a whole decode on ImageNet-like photos), unless it
// has restart markers. Each restart interval starts byte-aligned with fresh DC predictors, so
// the intervals a box needs, renumbered and put behind the same header with a smaller frame
// size, are a valid JPEG of just that part of the image: decoding it costs what the part costs.
// frugal-data convert writes JPEGs with a restart marker after every MCU
// (add_jpeg_restart_markers); some cameras write them too.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frugal/data/image/crop_box.hpp"

namespace frugal::detail {

/// Where a JPEG's restart intervals lie. Only for a single sequential Huffman scan with every
/// component in it (baseline and extended sequential), restart markers in order, and an
/// end-of-image marker after them; anything else has no layout (the caller decodes as usual).
struct RestartLayout {
  int width = 0;  // pixels
  int height = 0;
  int mcu_width = 0;  // pixels
  int mcu_height = 0;
  int mcus_per_row = 0;
  int mcu_rows = 0;
  int interval = 0;         // MCUs per restart interval
  size_t frame_header = 0;  // offset of the SOF marker
  size_t scan_start = 0;    // the first byte of entropy-coded data
  // Interval i's entropy-coded bytes: [starts[i], ends[i]), markers excluded.
  std::vector<size_t> starts;
  std::vector<size_t> ends;
};

std::optional<RestartLayout> restart_layout(const unsigned char* data, size_t size);

/// A JPEG of the restart intervals that hold `box` (in the full image's pixels) and, where the
/// box's edge lies on the MCU grid, the MCU beyond it (the context of chroma upsampling), so that
/// its pixels equal a whole decode's in the box. `x` and `y` are where its first pixel lies in the full image (multiples of the MCU size).
struct RestartCrop {
  std::string jpeg;  // empty: the box needs every interval, the original is the cut
  int x = 0;
  int y = 0;
  size_t scan_start = 0;  // of the original's entropy-coded data
};

/// Nothing when the JPEG has no usable layout (the caller then decodes as without markers).
std::optional<RestartCrop> restart_crop(const unsigned char* data, size_t size, const CropBox& box);

}  // namespace frugal::detail
