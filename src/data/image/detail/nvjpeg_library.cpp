#include "data/image/detail/nvjpeg_library.hpp"

#if FRUGAL_HAVE_NVJPEG

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace frugal::detail {
namespace {

// The nvidia-nvjpeg wheel installs beside torch: site-packages/nvidia/cu13/lib.
std::string wheel_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&at::get_num_threads), &info) == 0 || info.dli_fname == nullptr) return "";
  const std::filesystem::path torch_lib = std::filesystem::path(info.dli_fname).parent_path();
  return (torch_lib / ".." / ".." / "nvidia" / "cu13" / "lib" / "libnvjpeg.so.13").lexically_normal().string();
}

void* open_library(std::string& tried) {
  std::vector<std::string> names;
  if (const char* chosen = std::getenv("FRUGAL_NVJPEG_LIBRARY"); chosen != nullptr && *chosen != '\0') names.emplace_back(chosen);
  names.insert(names.end(), {"libnvjpeg.so.13", "libnvjpeg.so.12", wheel_path()});
  for (const auto& name : names) {
    if (name.empty()) continue;
    if (void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  return nullptr;
}

template <typename F>
bool resolve(void* library, const char* symbol, F& out, std::string& missing) {
  out = reinterpret_cast<F>(::dlsym(library, symbol));
  if (out == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  return out != nullptr;
}

}  // namespace

const NvJpeg* nvjpeg(std::string* why) {
  static std::once_flag once;
  static NvJpeg library;
  static const NvJpeg* loaded = nullptr;
  static std::string problem;
  std::call_once(once, [] {
    std::string tried;
    void* handle = open_library(tried);
    if (handle == nullptr) {
      problem = "libnvjpeg not found (tried " + tried + "; pip install nvidia-nvjpeg, or set FRUGAL_NVJPEG_LIBRARY)";
      return;
    }
    std::string missing;
    resolve(handle, "nvjpegCreateEx", library.create_ex, missing);
    resolve(handle, "nvjpegDestroy", library.destroy, missing);
    resolve(handle, "nvjpegJpegStateCreate", library.state_create, missing);
    resolve(handle, "nvjpegJpegStateDestroy", library.state_destroy, missing);
    resolve(handle, "nvjpegGetImageInfo", library.get_image_info, missing);
    resolve(handle, "nvjpegDecode", library.decode, missing);
    resolve(handle, "nvjpegDecodeBatchedInitialize", library.batched_initialize, missing);
    resolve(handle, "nvjpegDecodeBatched", library.decode_batched, missing);
    resolve(handle, "nvjpegJpegStreamCreate", library.stream_create, missing);
    resolve(handle, "nvjpegJpegStreamDestroy", library.stream_destroy, missing);
    resolve(handle, "nvjpegJpegStreamParse", library.stream_parse, missing);
    resolve(handle, "nvjpegDecodeBatchedSupported", library.batched_supported, missing);
    if (!missing.empty()) {
      problem = "libnvjpeg lacks " + missing;
      return;
    }
    loaded = &library;  // the handle stays open for the process's life
  });
  if (loaded == nullptr && why != nullptr) *why = problem;
  return loaded;
}

std::string nvjpeg_status_name(int status) {
  switch (status) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
    default: return "status " + std::to_string(status);
  }
}

}  // namespace frugal::detail

#endif
