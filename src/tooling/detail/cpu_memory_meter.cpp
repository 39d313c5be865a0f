#include "cpu_memory_meter.hpp"

#include <c10/core/Allocator.h>

#include <algorithm>
#include <atomic>

namespace frugal::detail {

struct CpuMemoryMeter::Reporter : c10::MemoryReportingInfoBase {
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, size_t /*total_allocated*/, size_t /*total_reserved*/,
                         c10::Device device) override {
    if (!device.is_cpu()) return;
    const int64_t now = live.fetch_add(alloc_size) + alloc_size;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
  // Frees of blocks allocated before the meter started make `live` dip below 0; the peak is
  // still the most that was added on top of what existed at the start.
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};
};

CpuMemoryMeter::CpuMemoryMeter()
    : reporter_(std::make_shared<Reporter>()),
      guard_(std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, reporter_)) {}

CpuMemoryMeter::~CpuMemoryMeter() = default;

int64_t CpuMemoryMeter::peak_bytes() const { return reporter_->peak.load(); }

}  // namespace frugal::detail
