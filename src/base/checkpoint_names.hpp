#pragma once
// How a checkpoint's folder and files are named, locally and in object storage alike: one
// definition, so that a local checkpoint and its remote copy can never disagree.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>

namespace frugal::detail {

/// ckpt-<step>, the step zero-padded to 9 digits (names sort as steps do).
inline std::string checkpoint_folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%09lld", static_cast<long long>(step));
  return name;
}

/// The step of a folder named ckpt-<step> (18 digits at most: no int64 overflow), else nullopt.
inline std::optional<int64_t> checkpoint_folder_step(const std::string& name) {
  static const std::regex pattern("ckpt-([0-9]{1,18})");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  return std::stoll(m[1].str());
}

/// A name a manifest may list: a file directly in the checkpoint's folder, nothing that leads out of it.
inline bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace frugal::detail
