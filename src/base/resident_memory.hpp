#pragma once
// The process's resident-memory high-water mark (Linux VmHWM), resettable so a phase of the
// program can measure its own peak. Returns 0 where /proc is not available.

#include <cstdint>

namespace frugal::detail {

int64_t resident_bytes();
int64_t peak_resident_bytes();
/// Lowers the high-water mark to the current resident size (writes 5 to /proc/self/clear_refs).
void reset_peak_resident();

}  // namespace frugal::detail
