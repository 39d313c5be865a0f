#include "support/source_dir.hpp"

namespace frugal::testing {

const char* source_dir() { return FRUGAL_SOURCE_DIR; }

}  // namespace frugal::testing
