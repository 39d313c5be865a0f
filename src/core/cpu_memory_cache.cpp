#include "frugal/core/cpu_memory_cache.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace {

// Sizes rounded up to a multiple of 1/8 of their power of two: at most 12.5% more than asked,
// and tensors whose shapes vary a little from step to step (unpadded batches) share a class.
size_t size_class(size_t bytes) {
  const int power = std::bit_width(bytes) - 1;
  const size_t step = size_t{1} << std::max(power - 3, 12);
  return (bytes + step - 1) / step * step;
}

int64_t quarter_of_physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : int64_t{1} << 30;
}

class CachingCpuAllocator final : public c10::Allocator {
 public:
  // Never destroyed: tensors (and oneDNN's scratch buffers) may be freed after static destructors.
  static CachingCpuAllocator& instance() {
    static auto* allocator = new CachingCpuAllocator();
    return *allocator;
  }

  // Installs this as LibTorch's CPU allocator, keeping the one it replaces for small blocks.
  bool install() {
    std::lock_guard lock(install_mutex_);
    if (fallback_ != nullptr) return true;
    fallback_ = c10::GetCPUAllocator();  // set first: allocate() may run as soon as this is installed
    c10::SetCPUAllocator(this);
    if (c10::GetCPUAllocator() == this) return true;
    fallback_ = nullptr;  // another was set with a higher priority
    return false;
  }

  void configure(bool enabled, size_t min_block, size_t limit) {
    std::lock_guard lock(mutex_);
    enabled_ = enabled;
    min_block_ = min_block;
    limit_ = limit;
  }

  c10::DataPtr allocate(size_t bytes) override {
    void* block = take(bytes);
    if (block == nullptr) return fallback_->allocate(bytes);
    return {block, block, &release, c10::Device(c10::DeviceType::CPU)};
  }

  // oneDNN allocates its buffers through raw_allocate / raw_deallocate.
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  void empty() {
    std::vector<void*> blocks;
    {
      std::lock_guard lock(mutex_);
      for (auto& [size, list] : free_) blocks.insert(blocks.end(), list.begin(), list.end());
      free_.clear();
      cached_ = 0;
    }
    for (void* block : blocks) c10::free_cpu(block);
  }

  bool enabled() const {
    std::lock_guard lock(mutex_);
    return enabled_;
  }

  CpuMemoryCacheStats stats() const {
    std::lock_guard lock(mutex_);
    return {hits_, misses_, static_cast<int64_t>(cached_), static_cast<int64_t>(limit_)};
  }

 private:
  static void release(void* block) { instance().give_back(block); }

  // A block of size_class(bytes), from the cache or the system; nullptr when the cache is off or
  // the block too small for it.
  void* take(size_t bytes) {
    std::unique_lock lock(mutex_);
    if (!enabled_ || bytes < min_block_) return nullptr;
    const size_t size = size_class(bytes);
    void* block = nullptr;
    if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
      block = it->second.back();  // the most recently freed: likeliest still in cache
      it->second.pop_back();
      cached_ -= size;
      ++hits_;
    } else {
      ++misses_;
      lock.unlock();
      block = allocate_from_system(size);
      lock.lock();
    }
    live_[block] = size;
    live_bytes_ += size;
    const Usage usage{block, static_cast<int64_t>(size), live_bytes_, live_bytes_ + cached_};
    lock.unlock();
    report(usage);
    return block;
  }

  // On failure, what the cache holds may be what is missing: free it and try once more.
  void* allocate_from_system(size_t size) {
    try {
      return c10::alloc_cpu(size);
    } catch (const c10::Error&) {
      empty();
      return c10::alloc_cpu(size);
    }
  }

  void give_back(void* block) {
    std::unique_lock lock(mutex_);
    const auto it = live_.find(block);
    if (it == live_.end()) {  // a small block, or one from before the install, freed through raw_deallocate
      lock.unlock();
      c10::DeleterFnPtr fallback_deleter = fallback_->raw_deleter();
      if (fallback_deleter != nullptr) {
        fallback_deleter(block);
      } else {
        c10::free_cpu(block);
      }
      return;
    }
    const size_t size = it->second;
    live_.erase(it);
    live_bytes_ -= size;
    const bool keep = enabled_ && cached_ + size <= limit_;
    if (keep) {
      free_[size].push_back(block);
      cached_ += size;
    }
    const Usage usage{block, -static_cast<int64_t>(size), live_bytes_, live_bytes_ + cached_};
    lock.unlock();
    if (!keep) c10::free_cpu(block);
    report(usage);
  }

  struct Usage {
    void* block;
    int64_t delta;
    size_t allocated, reserved;
  };
  // What LibTorch's default CPU allocator tells a memory profiler, said outside the lock (the
  // profiler may allocate).
  static void report(const Usage& u) {
    if (c10::memoryProfilingEnabled()) {
      c10::reportMemoryUsageToProfiler(u.block, u.delta, u.allocated, u.reserved, c10::Device(c10::DeviceType::CPU));
    }
  }

  std::mutex install_mutex_;
  c10::Allocator* fallback_ = nullptr;
  mutable std::mutex mutex_;
  bool enabled_ = false;
  size_t min_block_ = 0, limit_ = 0;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  std::unordered_map<void*, size_t> live_;               // block in use -> its size class
  size_t cached_ = 0, live_bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace

void CpuMemoryCacheOptions::validate() const {
  if (min_block_bytes() < 1) {
    throw OptionError("min_block_bytes", "min_block_bytes must be >= 1, got " + std::to_string(min_block_bytes()));
  }
  if (max_cached_bytes() < 0) {
    throw OptionError("max_cached_bytes", "max_cached_bytes must be >= 0 (0 = a quarter of physical memory), got " +
                                              std::to_string(max_cached_bytes()));
  }
}

void enable_cpu_memory_cache(const CpuMemoryCacheOptions& options) {
  options.validate();
  CachingCpuAllocator& allocator = CachingCpuAllocator::instance();
  if (!allocator.install()) {
    log::warn("CPU memory cache: not enabled, another CPU allocator was installed in LibTorch with a higher priority");
    return;
  }
  const int64_t limit = options.max_cached_bytes() > 0 ? options.max_cached_bytes() : quarter_of_physical_memory();
  allocator.configure(true, static_cast<size_t>(options.min_block_bytes()), static_cast<size_t>(limit));
}

void disable_cpu_memory_cache() {
  CachingCpuAllocator& allocator = CachingCpuAllocator::instance();
  const CpuMemoryCacheStats s = allocator.stats();
  allocator.configure(false, 0, static_cast<size_t>(s.limit_bytes));
  allocator.empty();
}

bool cpu_memory_cache_enabled() { return CachingCpuAllocator::instance().enabled(); }

void empty_cpu_memory_cache() { CachingCpuAllocator::instance().empty(); }

CpuMemoryCacheStats cpu_memory_cache_stats() { return CachingCpuAllocator::instance().stats(); }

}  // namespace frugal
