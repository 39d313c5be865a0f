#pragma once
// What a fit holds open while it runs and closes when it ends, also by an exception: the run's
// train.log, and the CPU memory cache (on for the fit if it is not on already, emptied after).

#include <filesystem>

#include "frugal/core/cpu_memory_cache.hpp"
#include "frugal/log.hpp"

namespace frugal::detail {

class LogFileScope {
 public:
  LogFileScope() = default;
  LogFileScope(const LogFileScope&) = delete;
  LogFileScope& operator=(const LogFileScope&) = delete;
  void open(const std::filesystem::path& file) {
    log::add_file_sink(file);
    open_ = true;
  }
  ~LogFileScope() {
    if (open_) log::remove_file_sink();
  }

 private:
  bool open_ = false;
};

class CpuMemoryCacheScope {
 public:
  explicit CpuMemoryCacheScope(bool wanted) {
    if (wanted && !cpu_memory_cache_enabled()) {
      enable_cpu_memory_cache();
      owned_ = cpu_memory_cache_enabled();
    }
  }
  CpuMemoryCacheScope(const CpuMemoryCacheScope&) = delete;
  CpuMemoryCacheScope& operator=(const CpuMemoryCacheScope&) = delete;
  ~CpuMemoryCacheScope() {
    if (owned_) disable_cpu_memory_cache();
  }

 private:
  bool owned_ = false;
};

}  // namespace frugal::detail
