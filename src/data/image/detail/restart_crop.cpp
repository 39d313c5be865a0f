#include "data/image/detail/restart_crop.hpp"

#include <algorithm>
#include <cstring>

namespace frugal::detail {
namespace {

constexpr unsigned char kSof0 = 0xC0, kSof1 = 0xC1, kDht = 0xC4, kJpg = 0xC8, kDac = 0xCC, kRst0 = 0xD0, kRst7 = 0xD7,
                        kSoi = 0xD8, kEoi = 0xD9, kSos = 0xDA, kDri = 0xDD;

int read16(const unsigned char* p) { return (p[0] << 8) | p[1]; }

struct Frame {
  int width = 0, height = 0, components = 0, h_max = 1, v_max = 1;
};

// The frame header's payload (after the length): precision, size, components with their
// sampling factors. False for what a restart cut cannot handle (libjpeg reports real errors).
bool read_frame(const unsigned char* p, size_t length, Frame* frame) {
  if (length < 6 || p[0] != 8) return false;
  frame->height = read16(p + 1);
  frame->width = read16(p + 3);
  frame->components = p[5];
  if (frame->width == 0 || frame->height == 0 || frame->components < 1 || frame->components > 4 ||
      length != 6 + 3 * static_cast<size_t>(frame->components)) {
    return false;
  }
  for (int c = 0; c < frame->components; ++c) {
    const int h = p[7 + 3 * c] >> 4, v = p[7 + 3 * c] & 15;
    if (h < 1 || h > 4 || v < 1 || v > 4) return false;
    frame->h_max = std::max(frame->h_max, h);
    frame->v_max = std::max(frame->v_max, v);
  }
  return true;
}

// The scan header's payload: every component, sequential (Ss 0, Se 63, Ah Al 0).
bool read_scan(const unsigned char* p, size_t length, int components) {
  if (length < 1 || p[0] != components || length != 4 + 2 * static_cast<size_t>(components)) return false;
  const unsigned char* tail = p + 1 + 2 * components;
  return tail[0] == 0 && tail[1] == 63 && tail[2] == 0;
}

// Walks the entropy-coded data from `at`, splitting it at restart markers. False unless the
// markers come in order and the data ends with an end-of-image marker.
bool split_intervals(const unsigned char* data, size_t size, size_t at, RestartLayout* layout) {
  size_t start = at;
  int expected = 0;
  while (at < size) {
    const auto* ff = static_cast<const unsigned char*>(std::memchr(data + at, 0xFF, size - at));
    if (ff == nullptr) return false;
    const size_t marker_start = static_cast<size_t>(ff - data);
    size_t p = marker_start + 1;
    while (p < size && data[p] == 0xFF) ++p;  // fill bytes before a marker
    if (p >= size) return false;
    const unsigned char code = data[p];
    if (code == 0x00) {  // a stuffed 0xFF data byte
      at = p + 1;
      continue;
    }
    if (code >= kRst0 && code <= kRst7) {
      if (code - kRst0 != expected % 8) return false;
      ++expected;
    } else if (code != kEoi) {
      return false;  // DNL, a second scan, ...: not a single scan cut by restarts
    }
    layout->starts.push_back(start);
    layout->ends.push_back(marker_start);
    if (code == kEoi) return true;
    start = at = p + 1;
  }
  return false;
}

void append_marker(std::string* out, unsigned char code) {
  out->push_back(static_cast<char>(0xFF));
  out->push_back(static_cast<char>(code));
}

}  // namespace

std::optional<RestartLayout> restart_layout(const unsigned char* data, size_t size) {
  if (size < 4 || data[0] != 0xFF || data[1] != kSoi) return std::nullopt;
  RestartLayout layout;
  Frame frame;
  bool have_frame = false;
  size_t at = 2;
  while (true) {
    while (at < size && data[at] == 0xFF && at + 1 < size && data[at + 1] == 0xFF) ++at;  // fill bytes
    if (at + 4 > size || data[at] != 0xFF) return std::nullopt;
    const unsigned char code = data[at + 1];
    const size_t length = static_cast<size_t>(read16(data + at + 2));
    if (length < 2 || at + 2 + length > size) return std::nullopt;
    const unsigned char* payload = data + at + 4;
    const size_t payload_length = length - 2;
    if (code >= 0xC0 && code <= 0xCF && code != kDht && code != kJpg && code != kDac) {
      // A frame header: only the sequential Huffman ones (progressive, lossless and arithmetic
      // coding are decoded as usual).
      if ((code != kSof0 && code != kSof1) || have_frame || !read_frame(payload, payload_length, &frame)) return std::nullopt;
      have_frame = true;
      layout.frame_header = at;
    } else if (code == kDri) {
      if (payload_length != 2) return std::nullopt;
      layout.interval = read16(payload);
    } else if (code == kSos) {
      if (!have_frame || layout.interval == 0 || !read_scan(payload, payload_length, frame.components)) return std::nullopt;
      layout.scan_start = at + 2 + length;
      break;
    } else if (code == kEoi || code == kSoi || (code >= kRst0 && code <= kRst7) || code == 0x01) {
      return std::nullopt;  // a marker without a length where a segment belongs: let libjpeg say so
    }
    at += 2 + length;
  }
  layout.width = frame.width;
  layout.height = frame.height;
  // One component: its MCU is one 8x8 block. Interleaved: the largest sampling factors' blocks.
  layout.mcu_width = frame.components == 1 ? 8 : 8 * frame.h_max;
  layout.mcu_height = frame.components == 1 ? 8 : 8 * frame.v_max;
  layout.mcus_per_row = (layout.width + layout.mcu_width - 1) / layout.mcu_width;
  layout.mcu_rows = (layout.height + layout.mcu_height - 1) / layout.mcu_height;
  const int64_t mcus = int64_t{layout.mcus_per_row} * layout.mcu_rows;
  const auto intervals = static_cast<size_t>((mcus + layout.interval - 1) / layout.interval);
  layout.starts.reserve(intervals);
  layout.ends.reserve(intervals);
  if (!split_intervals(data, size, layout.scan_start, &layout) || layout.starts.size() != intervals) return std::nullopt;
  return layout;
}

std::optional<RestartCrop> restart_crop(const unsigned char* data, size_t size, const CropBox& box) {
  // Most JPEGs have no restart markers: restart_layout refuses them at the scan header.
  const std::optional<RestartLayout> found = restart_layout(data, size);
  if (!found) return std::nullopt;
  const RestartLayout& l = *found;
  if (box.width < 1 || box.height < 1 || box.x < 0 || box.y < 0 || box.x + box.width > l.width || box.y + box.height > l.height) {
    return std::nullopt;
  }
  // The MCU columns and rows of the box. Fancy upsampling computes a pixel from its own chroma
  // sample and the next one towards it; only the first and last pixel of an MCU reach into the
  // neighbouring MCU, so a neighbour is included only where the box starts or ends on the MCU grid
  // (in scaled pixels too: the scaled box's edges are the full box's divided by the scale).
  const auto first_mcu = [](int64_t start, int size) { return static_cast<int>(start / size) - (start % size == 0 ? 1 : 0); };
  const auto end_mcu = [](int64_t end, int size) { return static_cast<int>((end + size - 1) / size) + (end % size == 0 ? 1 : 0); };
  int c0 = std::max(0, first_mcu(box.x, l.mcu_width));
  int c1 = std::min(l.mcus_per_row, end_mcu(box.x + box.width, l.mcu_width));
  int r0 = std::max(0, first_mcu(box.y, l.mcu_height));
  int r1 = std::min(l.mcu_rows, end_mcu(box.y + box.height, l.mcu_height));
  // At least two MCUs across and down where the image has them: libjpeg-turbo upsamples a
  // component at most 2 samples wide by replication instead (an image 4 pixels wide at 4:2:0).
  if (c1 - c0 < 2 && l.mcus_per_row >= 2) {
    if (c0 > 0) {
      --c0;
    } else {
      ++c1;
    }
  }
  if (r1 - r0 < 2 && l.mcu_rows >= 2) {
    if (r0 > 0) {
      --r0;
    } else {
      ++r1;
    }
  }
  std::vector<size_t> picked;
  if (l.mcus_per_row % l.interval == 0) {  // intervals within rows: cut rows and columns
    const int per_row = l.mcus_per_row / l.interval;
    c0 = c0 / l.interval * l.interval;
    c1 = std::min(l.mcus_per_row, (c1 + l.interval - 1) / l.interval * l.interval);
    for (int r = r0; r < r1; ++r) {
      for (int c = c0 / l.interval; c < c1 / l.interval; ++c) picked.push_back(static_cast<size_t>(r) * per_row + c);
    }
  } else {  // intervals across rows: cut whole rows where an interval starts a row
    c0 = 0;
    c1 = l.mcus_per_row;
    const auto starts_row = [&](int r) { return int64_t{r} * l.mcus_per_row % l.interval == 0; };
    while (r0 > 0 && !starts_row(r0)) --r0;
    while (r1 < l.mcu_rows && !starts_row(r1)) ++r1;
    const int64_t first = int64_t{r0} * l.mcus_per_row / l.interval;
    const int64_t end = (int64_t{r1} * l.mcus_per_row + l.interval - 1) / l.interval;
    for (int64_t i = first; i < end; ++i) picked.push_back(static_cast<size_t>(i));
  }
  if (c0 == 0 && c1 == l.mcus_per_row && r0 == 0 && r1 == l.mcu_rows) return RestartCrop{"", 0, 0, l.scan_start};  // all of it
  RestartCrop crop;
  crop.x = c0 * l.mcu_width;
  crop.y = r0 * l.mcu_height;
  crop.scan_start = l.scan_start;
  const int width = std::min(l.width, c1 * l.mcu_width) - crop.x;
  const int height = std::min(l.height, r1 * l.mcu_height) - crop.y;
  size_t bytes = l.scan_start + 2;
  for (const size_t i : picked) bytes += l.ends[i] - l.starts[i] + 2;
  std::string& out = crop.jpeg;
  out.reserve(bytes);
  out.assign(reinterpret_cast<const char*>(data), l.scan_start);  // every table, the new size below
  out[l.frame_header + 5] = static_cast<char>(height >> 8);
  out[l.frame_header + 6] = static_cast<char>(height & 0xFF);
  out[l.frame_header + 7] = static_cast<char>(width >> 8);
  out[l.frame_header + 8] = static_cast<char>(width & 0xFF);
  for (size_t n = 0; n < picked.size(); ++n) {
    if (n > 0) append_marker(&out, static_cast<unsigned char>(kRst0 + (n - 1) % 8));
    out.append(reinterpret_cast<const char*>(data) + l.starts[picked[n]], l.ends[picked[n]] - l.starts[picked[n]]);
  }
  append_marker(&out, kEoi);
  return crop;
}

}  // namespace frugal::detail
