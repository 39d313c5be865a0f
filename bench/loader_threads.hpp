#pragma once
// The loader's workers against a busy training thread (issue 31), see loader_threads.cpp.

#include <filesystem>
#include <string>

namespace frugal::bench {

void loader_threads_scaling(const std::string& results, const std::filesystem::path& dir, const std::string& command);
void collate_reuse(const std::string& results, const std::string& command);

}  // namespace frugal::bench
