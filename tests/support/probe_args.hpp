#pragma once
// The command line of the multi-process probes: `probe MODE [key=value ...]`, and their main():
// the mode's exit code, or 1 printing the error (every rank's output is read by the test script).

#include <functional>
#include <iostream>
#include <map>
#include <string>

#include "frugal/config/exit_process.hpp"

namespace frugal::testing {

struct ProbeArgs {
  std::string mode;
  std::map<std::string, std::string> values;
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
  int64_t num(const std::string& key, int64_t fallback) const { return std::stoll(get(key, std::to_string(fallback))); }
};

inline int probe_main(int argc, char** argv, const std::string& default_mode, const std::function<int(const ProbeArgs&)>& run) {
  ProbeArgs args;
  args.mode = argc > 1 ? argv[1] : default_mode;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos) {
      std::cerr << "probe: expected key=value, got '" << a << "'\n";
      return 2;
    }
    args.values[a.substr(0, eq)] = a.substr(eq + 1);
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cout << "probe: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace frugal::testing
