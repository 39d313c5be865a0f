#include "resident_memory.hpp"

#include <fstream>
#include <string>

namespace frugal::detail {
namespace {

int64_t read_status_kb(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

}  // namespace

int64_t resident_bytes() { return read_status_kb("VmRSS"); }
int64_t peak_resident_bytes() { return read_status_kb("VmHWM"); }

void reset_peak_resident() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  if (clear_refs) clear_refs << "5";
}

}  // namespace frugal::detail
