#pragma once
// The source tree's path, for tests and benchmarks that run its scripts or read its files.
// Defined in one object file (source_dir.cpp): as a compile definition of every such file it made
// each of them miss ccache in a clone at another path (CI's fresh clones).

namespace frugal::testing {

const char* source_dir();

}  // namespace frugal::testing
