#pragma once
// Counts LibTorch's CPU allocations on this thread (and the autograd work it starts) while in
// scope, through the allocator's memory reports (the profiler's hook), and keeps their peak.

#include <c10/util/ThreadLocalDebugInfo.h>

#include <cstdint>
#include <memory>

namespace frugal::detail {

class CpuMemoryMeter {
 public:
  CpuMemoryMeter();
  ~CpuMemoryMeter();
  CpuMemoryMeter(const CpuMemoryMeter&) = delete;
  CpuMemoryMeter& operator=(const CpuMemoryMeter&) = delete;
  /// Most bytes live at once, counting only allocations made while in scope.
  int64_t peak_bytes() const;

 private:
  struct Reporter;
  std::shared_ptr<Reporter> reporter_;
  std::unique_ptr<c10::DebugInfoGuard> guard_;
};

}  // namespace frugal::detail
