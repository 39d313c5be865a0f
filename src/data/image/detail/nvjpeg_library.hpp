#pragma once
// libnvjpeg, opened at run time: a build without it, and a machine without it or without a GPU,
// still build and run (GPU decoding then reports itself unavailable and the CPU path is used).
// Searched as FRUGAL_NVJPEG_LIBRARY, then libnvjpeg.so.13 / .12 on the loader's path, then in
// the nvidia-nvjpeg wheel beside the torch wheel that LibTorch was loaded from.

#include <string>

// The build gives this header's includers nvjpeg.h's directory when it found one.
#if __has_include(<nvjpeg.h>)
#include <nvjpeg.h>
#define FRUGAL_HAVE_NVJPEG 1
#else
#define FRUGAL_HAVE_NVJPEG 0
#endif

namespace frugal::detail {

#if FRUGAL_HAVE_NVJPEG
struct NvJpeg {
  decltype(&::nvjpegCreateEx) create_ex = nullptr;
  decltype(&::nvjpegDestroy) destroy = nullptr;
  decltype(&::nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&::nvjpegJpegStateDestroy) state_destroy = nullptr;
  decltype(&::nvjpegGetImageInfo) get_image_info = nullptr;
  decltype(&::nvjpegDecode) decode = nullptr;
  decltype(&::nvjpegDecodeBatchedInitialize) batched_initialize = nullptr;
  decltype(&::nvjpegDecodeBatched) decode_batched = nullptr;
  decltype(&::nvjpegJpegStreamCreate) stream_create = nullptr;
  decltype(&::nvjpegJpegStreamDestroy) stream_destroy = nullptr;
  decltype(&::nvjpegJpegStreamParse) stream_parse = nullptr;
  decltype(&::nvjpegDecodeBatchedSupported) batched_supported = nullptr;
};

/// The library's functions, or null with `why` saying what is missing (loaded once).
const NvJpeg* nvjpeg(std::string* why = nullptr);

/// A readable name of an nvjpegStatus_t.
std::string nvjpeg_status_name(int status);
#endif

/// Whether this build has the GPU decoder at all.
constexpr bool built_with_nvjpeg() { return FRUGAL_HAVE_NVJPEG != 0; }

}  // namespace frugal::detail
