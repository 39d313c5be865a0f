// decode_jpeg_region: libjpeg-turbo's libjpeg API (TurboJPEG 2.1 has no cropping), with its
// setjmp error handling kept to two C-style phases that hold no C++ object with a destructor.
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <optional>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "data/image/detail/jpeg_scaling.hpp"
#include "data/image/detail/libjpeg_errors.hpp"
#include "data/image/detail/restart_crop.hpp"
#include "frugal/data/image/jpeg.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace {

struct Plan {
  int denom = 1;
  bool cmyk = false;
  bool whole = false;  // decode every pixel (of a restart cut); otherwise skip and crop to the box
  CropBox box;  // in scaled pixels
  // Set by start(): the first output row and column, and the width after jpeg_crop_scanline.
  // They start one MCU before the box (where the image has one): fancy upsampling then sees the
  // box's true neighbours, never the edge of what was decoded, and the box decodes exactly.
  JDIMENSION first_row = 0;
  JDIMENSION x_offset = 0;
  JDIMENSION width = 0;
  JDIMENSION scaled_width = 0;
  JDIMENSION scaled_height = 0;
  size_t scan_start = 0;  // where the entropy-coded data begins
  int64_t rows_read = 0;  // of the box, by read_rows()
};

// Phase 1: header, scaling, output colour space, start, column crop. False: err->message says why.
bool start(jpeg_decompress_struct* cinfo, detail::LibjpegErrors* err, const unsigned char* data, size_t size, Plan* plan) {
  if (setjmp(err->jump) != 0) return false;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  plan->scan_start = static_cast<size_t>(cinfo->src->next_input_byte - data);
  // The whole-image decoder's settings (TurboJPEG with TJFLAG_ACCURATEDCT): the same pixels.
  cinfo->out_color_space = plan->cmyk ? JCS_CMYK : JCS_EXT_RGB;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(plan->denom);
  jpeg_start_decompress(cinfo);
  plan->scaled_width = cinfo->output_width;
  plan->scaled_height = cinfo->output_height;
  if (plan->box.x + plan->box.width > static_cast<int64_t>(cinfo->output_width) ||
      plan->box.y + plan->box.height > static_cast<int64_t>(cinfo->output_height)) {
    std::snprintf(err->message, sizeof err->message, "the decoder's scaled size %ux%u differs from the header's",
                  cinfo->output_width, cinfo->output_height);
    return false;
  }
  if (plan->whole) {
    plan->width = cinfo->output_width;
    return true;
  }
  // One MCU (in output pixels) of context on each side; rows below are read ahead by libjpeg.
  const auto mcu_width = static_cast<int64_t>(cinfo->max_h_samp_factor) * cinfo->min_DCT_scaled_size;
  const auto mcu_height = static_cast<int64_t>(cinfo->max_v_samp_factor) * cinfo->min_DCT_scaled_size;
  const int64_t left = std::max<int64_t>(0, plan->box.x - mcu_width);
  const int64_t right = std::min<int64_t>(cinfo->output_width, plan->box.x + plan->box.width + mcu_width);
  plan->first_row = static_cast<JDIMENSION>(std::max<int64_t>(0, plan->box.y - mcu_height));
  plan->x_offset = static_cast<JDIMENSION>(left);
  plan->width = static_cast<JDIMENSION>(right - left);
  // libjpeg-turbo 2.1 crops a DCT-scaled image with 4x horizontal chroma sampling (4:1:1, 4:1:0)
  // to other pixels than a whole decode gives (up to 4 levels off): such rare files keep every column.
  const bool crop_is_exact = plan->denom == 1 || cinfo->max_h_samp_factor <= 2;
  if (plan->width < cinfo->output_width && crop_is_exact) {
    jpeg_crop_scanline(cinfo, &plan->x_offset, &plan->width);  // to whole MCU columns
  } else {
    plan->x_offset = 0;
    plan->width = cinfo->output_width;
  }
  return true;
}

// The rows decoded into the output: from one MCU above the box to its end, or all of a restart cut's.
int64_t first_row(const Plan& plan) { return plan.whole ? 0 : static_cast<int64_t>(plan.first_row); }
int64_t row_count(const Plan& plan) {
  return plan.whole ? static_cast<int64_t>(plan.scaled_height) : plan.box.y + plan.box.height - first_row(plan);
}

// Phase 2: skip the rows above the box, read its rows into `out` (rows of `stride` bytes).
bool read_rows(jpeg_decompress_struct* cinfo, detail::LibjpegErrors* err, Plan* plan, unsigned char* out, size_t stride) {
  if (setjmp(err->jump) != 0) return false;
  auto skip = static_cast<JDIMENSION>(first_row(*plan));
  while (skip > 0) {
    const JDIMENSION skipped = jpeg_skip_scanlines(cinfo, skip);
    if (skipped == 0) break;
    skip -= skipped;
  }
  if (skip == 0) {
    while (plan->rows_read < row_count(*plan)) {
      JSAMPROW line = out + static_cast<size_t>(plan->rows_read) * stride;
      const JDIMENSION got = jpeg_read_scanlines(cinfo, &line, 1);
      if (got == 0) break;  // a memory source never suspends; the caller reports a short read
      plan->rows_read += got;
    }
  }
  if (cinfo->output_scanline == cinfo->output_height) {
    jpeg_finish_decompress(cinfo);  // reads to the end marker, as a whole decode does
  } else {
    jpeg_abort_decompress(cinfo);
  }
  return true;
}

}  // namespace

DecodedRegion decode_jpeg_region(std::string_view bytes, const std::string& where, const CropBox& region, int min_width,
                                 int min_height) {
  const JpegSize full = jpeg_size(bytes, where);
  if (const std::string problem = detail::pixel_limit_problem(full.width, full.height); !problem.empty()) {
    throw DataError(where, -1, problem);
  }
  if (region.width < 1 || region.height < 1 || region.x < 0 || region.y < 0 || region.x + region.width > full.width ||
      region.y + region.height > full.height) {
    throw Error(c10::str("decode_jpeg_region: region (", region.x, ", ", region.y, ", ", region.width, "x", region.height,
                         ") is outside the ", full.width, "x", full.height, " image ", where));
  }
  Plan plan;
  plan.denom = detail::fast_dct_scale(full.width, full.height, min_width, min_height).denom;
  plan.cmyk = full.cmyk;
  const int scaled_width = detail::scaled_size(full.width, {1, plan.denom});
  const int scaled_height = detail::scaled_size(full.height, {1, plan.denom});
  plan.box = detail::scale_box(region, full.width, full.height, scaled_width, scaled_height);
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());

  // With restart markers: decode a JPEG of just the intervals around the box, whole (all of the
  // original when the box needs every interval: exact too, where skipping is not). Its origin
  // is a multiple of the MCU size (8 x the sampling factor), so of the scaling's denominator too.
  const CropBox needed{plan.box.x * plan.denom, plan.box.y * plan.denom,
                       std::min<int64_t>(full.width, (plan.box.x + plan.box.width) * plan.denom) - plan.box.x * plan.denom,
                       std::min<int64_t>(full.height, (plan.box.y + plan.box.height) * plan.denom) - plan.box.y * plan.denom};
  const std::optional<detail::RestartCrop> cut = detail::restart_crop(data, bytes.size(), needed);
  const unsigned char* source = data;
  size_t source_size = bytes.size();
  if (cut) {
    if (!cut->jpeg.empty()) {
      source = reinterpret_cast<const unsigned char*>(cut->jpeg.data());
      source_size = cut->jpeg.size();
    }
    plan.whole = true;
    plan.box.x -= cut->x / plan.denom;
    plan.box.y -= cut->y / plan.denom;
  }

  jpeg_decompress_struct cinfo{};
  detail::LibjpegErrors err{};
  detail::use_libjpeg_errors(reinterpret_cast<j_common_ptr>(&cinfo), &err);
  jpeg_create_decompress(&cinfo);
  auto failed = [&]() -> DataError {
    jpeg_destroy_decompress(&cinfo);
    return DataError(where, -1, std::string("corrupt JPEG: ") + err.message);
  };
  if (!start(&cinfo, &err, source, source_size, &plan)) throw failed();
  const int channels = plan.cmyk ? 4 : 3;
  torch::Tensor out = torch::empty({row_count(plan), static_cast<int64_t>(plan.width), channels}, torch::kUInt8);
  if (!read_rows(&cinfo, &err, &plan, out.data_ptr<uint8_t>(), static_cast<size_t>(plan.width) * channels)) throw failed();
  if (!err.truncated && plan.rows_read < row_count(plan)) {
    std::snprintf(err.message, sizeof err.message, "only %lld of the region's %lld rows decoded",
                  static_cast<long long>(plan.rows_read), static_cast<long long>(row_count(plan)));
    err.truncated = true;
  }
  if (!err.truncated && !detail::has_end_marker(data, bytes.size(), cut ? cut->scan_start : plan.scan_start)) {
    std::snprintf(err.message, sizeof err.message, "Premature end of JPEG file (no end-of-image marker)");
    err.truncated = true;
  }
  if (err.truncated) throw failed();
  jpeg_destroy_decompress(&cinfo);

  DecodedRegion decoded;
  decoded.scaled_width = scaled_width;
  decoded.scaled_height = scaled_height;
  decoded.region = {plan.box.x - static_cast<int64_t>(plan.x_offset), plan.box.y - first_row(plan), plan.box.width, plan.box.height};
  if (plan.cmyk) {
    torch::Tensor rgb = torch::empty({out.size(0), out.size(1), 3}, torch::kUInt8);
    detail::cmyk_to_rgb(out.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>(), out.size(0) * out.size(1));
    out = rgb;
  }
  decoded.image = out;
  return decoded;
}

}  // namespace frugal
