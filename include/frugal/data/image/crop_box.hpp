#pragma once
// A region of an image in pixels, as the crop transforms and the region decoder share it.

#include <cstdint>

namespace frugal {

struct CropBox {
  int64_t x = 0;
  int64_t y = 0;
  int64_t width = 0;
  int64_t height = 0;
};

}  // namespace frugal
