#pragma once
// Helpers for the libFuzzer targets in this folder (scripts/fuzz.sh builds and runs them): the
// input as a file for readers that take a path, and the rule every target checks: a parser of
// outside input may fail only with a frugal::Error. Anything else (std::bad_alloc, an out-of-range
// exception, a crash or a sanitizer report) is a finding.

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "frugal/errors.hpp"

namespace frugal::fuzz {

/// The input written to a file of this process (the same path each time), for path-based readers.
inline std::filesystem::path as_file(std::string_view bytes, const std::string& extension) {
  static const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("frugal_fuzz_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / ("input" + extension);
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return file;
}

/// Runs `parse`; a frugal::Error is the expected outcome of bad input, anything else escapes.
template <typename F>
int expect_frugal_errors(F&& parse) {
  try {
    parse();
  } catch (const frugal::Error&) {
  }
  return 0;
}

inline std::string_view bytes_of(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

}  // namespace frugal::fuzz
