#pragma once
// Runs a reference script from tests/reference with the Python whose torch is our LibTorch
// (FRUGAL_TEST_PYTHON) and returns the JSON it prints.

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "support/source_dir.hpp"

namespace frugal::testing {

inline nlohmann::json run_python_reference(const std::string& script, const std::string& args = "") {
  const std::string command = std::string(FRUGAL_TEST_PYTHON) + " " + frugal::testing::source_dir() + "/tests/reference/" +
                              script + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run: " + command);
  std::string out;
  std::array<char, 4096> buffer{};
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (status != 0) throw std::runtime_error("reference script failed (" + command + "):\n" + out);
  return nlohmann::json::parse(out.substr(out.find('{')));
}

}  // namespace frugal::testing
