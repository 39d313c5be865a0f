#pragma once
// Benchmarks against a Python reference run in a child process: the script prints
// {"seconds": S} for the timed part; rounds alternate between Frugal and Python so that neither
// always runs on a warmer machine.

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "interleaved.hpp"

namespace frugal::bench {

inline double python_seconds(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string out(1 << 16, '\0');
  out.resize(fread(out.data(), 1, out.size(), pipe));
  if (pclose(pipe) != 0) throw std::runtime_error("failed: " + command + "\n" + out);
  return nlohmann::json::parse(out.substr(out.find('{')))["seconds"].get<double>();
}

/// Median seconds of `ours` and of `theirs` over `rounds` alternating rounds, each round printed.
inline std::pair<double, double> alternate(int rounds, const std::function<double()>& ours, const std::function<double()>& theirs,
                                           const char* theirs_name) {
  std::vector<double> a, b;
  for (int round = 0; round < rounds; ++round) {
    a.push_back(ours());
    b.push_back(theirs());
    std::printf("round %d: Frugal %.3f s, %s %.3f s\n", round, a.back(), theirs_name, b.back());
  }
  return {median(a), median(b)};
}

}  // namespace frugal::bench
