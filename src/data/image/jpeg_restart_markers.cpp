// add_jpeg_restart_markers: jpegtran's lossless transcoding (the DCT coefficients are copied, not
// decoded to pixels), with libjpeg's setjmp error handling kept to one C-style function that
// holds no C++ object with a destructor.
#include <c10/util/StringUtil.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "data/image/detail/jpeg_scaling.hpp"
#include "data/image/detail/libjpeg_errors.hpp"
#include "frugal/data/image/jpeg.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace {

// Output into one malloc'ed buffer, grown by realloc, whose current address is always here:
// libjpeg's jpeg_mem_dest frees its first buffer when it grows and reports the new one only at
// the end, so after an error mid-way its caller would free a freed buffer (found by fuzzing).
struct GrowingDestination {
  jpeg_destination_mgr pub;
  unsigned char* buffer;  // freed by the caller, also after a failure
  size_t capacity;
};

extern "C" void start_output(j_compress_ptr) {}
extern "C" void end_output(j_compress_ptr) {}

extern "C" boolean grow_output(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<GrowingDestination*>(cinfo->dest);
  const size_t bigger = d->capacity * 2;
  auto* next = static_cast<unsigned char*>(std::realloc(d->buffer, bigger));
  if (next == nullptr) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  d->buffer = next;
  d->pub.next_output_byte = next + d->capacity;
  d->pub.free_in_buffer = bigger - d->capacity;
  d->capacity = bigger;
  return TRUE;
}

bool starts_with(const jpeg_saved_marker_ptr marker, const char* tag, size_t length) {
  return marker->data_length >= length && std::memcmp(marker->data, tag, length) == 0;
}

// False: err->message says why.
bool transcode(jpeg_decompress_struct* src, jpeg_compress_struct* dst, detail::LibjpegErrors* err, const unsigned char* data, size_t size,
               unsigned int mcus_per_interval, GrowingDestination* out) {
  if (setjmp(err->jump) != 0) return false;
  jpeg_mem_src(src, data, static_cast<unsigned long>(size));
  // Keep what is not pixels too: Exif (orientation), ICC profiles, comments.
  jpeg_save_markers(src, JPEG_COM, 0xFFFF);
  for (int m = 0; m < 16; ++m) jpeg_save_markers(src, JPEG_APP0 + m, 0xFFFF);
  jpeg_read_header(src, TRUE);
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(src);
  jpeg_copy_critical_parameters(src, dst);  // sizes, sampling, quantization tables, colour space
  dst->restart_interval = mcus_per_interval;
  dst->optimize_coding = TRUE;  // Huffman tables fitted to the image: the file usually shrinks
  dst->dest = &out->pub;
  jpeg_write_coefficients(dst, coefficients);
  for (jpeg_saved_marker_ptr m = src->marker_list; m != nullptr; m = m->next) {
    // The JFIF and Adobe markers are written anew by the encoder (as jpegtran skips them).
    if (dst->write_JFIF_header && m->marker == JPEG_APP0 && starts_with(m, "JFIF\0", 5)) continue;
    if (dst->write_Adobe_marker && m->marker == JPEG_APP0 + 14 && starts_with(m, "Adobe", 5)) continue;
    jpeg_write_marker(dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(dst);
  jpeg_finish_decompress(src);
  return true;
}

}  // namespace

std::string add_jpeg_restart_markers(std::string_view bytes, const std::string& where, int mcus_per_interval) {
  if (mcus_per_interval < 1 || mcus_per_interval > 65535) {
    throw Error(c10::str("add_jpeg_restart_markers: mcus_per_interval must be in 1..65535, got ", mcus_per_interval));
  }
  const JpegSize size = jpeg_size(bytes, where);  // DataError naming `where` for what is not a JPEG
  if (const std::string problem = detail::pixel_limit_problem(size.width, size.height); !problem.empty()) {
    throw DataError(where, -1, problem);
  }
  GrowingDestination out{};
  // Half the input: most rewrites then grow once, so that path runs always, not on rare files.
  out.capacity = bytes.size() / 2 + 4096;
  out.buffer = static_cast<unsigned char*>(std::malloc(out.capacity));
  if (out.buffer == nullptr) throw std::bad_alloc();
  out.pub.next_output_byte = out.buffer;
  out.pub.free_in_buffer = out.capacity;
  out.pub.init_destination = start_output;
  out.pub.empty_output_buffer = grow_output;
  out.pub.term_destination = end_output;
  jpeg_decompress_struct src{};
  jpeg_compress_struct dst{};
  detail::LibjpegErrors err{};  // any warning fails the rewrite: it would store the decoder's repair as the image
  detail::use_libjpeg_errors(reinterpret_cast<j_common_ptr>(&src), &err);
  dst.err = src.err;
  jpeg_create_decompress(&src);
  jpeg_create_compress(&dst);
  const bool ok = transcode(&src, &dst, &err, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                            static_cast<unsigned int>(mcus_per_interval), &out);
  jpeg_destroy_compress(&dst);
  jpeg_destroy_decompress(&src);
  const std::unique_ptr<unsigned char, decltype(&std::free)> written(out.buffer, &std::free);
  if (!ok || err.warned) throw DataError(where, -1, std::string("corrupt JPEG: ") + err.message);
  return std::string(reinterpret_cast<const char*>(written.get()), out.capacity - out.pub.free_in_buffer);
}

}  // namespace frugal
