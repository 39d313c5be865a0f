#pragma once
// A caching allocator for LibTorch's CPU tensors, as PyTorch's caching allocator is for CUDA ones.
// glibc hands large freed blocks back to the kernel (munmap, heap trimming), so the next step's
// tensors are faulted in and zeroed again page by page: a BERT training step on the CPU took 4-10%
// longer without this cache (docs/benchmarks.md). With the cache on, a freed block of at least min_block_bytes is kept in
// its size class (sizes rounded up by at most 1/8) and handed to the next tensor of that class.
//
//   frugal::enable_cpu_memory_cache();                    // the Trainer does this during fit()
//   ... train ...
//   frugal::cpu_memory_cache_stats().hits;                // blocks served from the cache
//   frugal::disable_cpu_memory_cache();                   // gives what it holds back to the system
//
// Process-wide, thread-safe. Once enabled it stays LibTorch's CPU allocator (blocks allocated
// through it can still be freed through it); disabled, it passes every call to LibTorch's default.

#include <torch/arg.h>

#include <cstdint>

namespace frugal {

struct CpuMemoryCacheOptions {
  /// Smaller blocks are left to malloc, whose free lists keep them; 128 KiB is glibc's initial
  /// mmap threshold, above which it maps each block afresh.
  TORCH_ARG(int64_t, min_block_bytes) = int64_t{128} << 10;
  /// Most bytes held in free blocks; a block freed beyond it goes back to the system. 0 = a
  /// quarter of the machine's physical memory.
  TORCH_ARG(int64_t, max_cached_bytes) = 0;

 public:
  /// Throws OptionError naming the bad field and value.
  void validate() const;
};

struct CpuMemoryCacheStats {
  int64_t hits = 0;          // allocations served from a free block
  int64_t misses = 0;        // allocations of cacheable size that went to the system
  int64_t cached_bytes = 0;  // held in free blocks now
  int64_t limit_bytes = 0;   // max_cached_bytes, resolved
};

/// Installs the cache as LibTorch's CPU allocator (once) and turns it on with these options.
void enable_cpu_memory_cache(const CpuMemoryCacheOptions& options = {});
/// Turns it off and frees the blocks it holds; blocks in use are freed when their tensors go.
void disable_cpu_memory_cache();
bool cpu_memory_cache_enabled();
/// Frees the blocks it holds, as torch.cuda.empty_cache() does for CUDA.
void empty_cpu_memory_cache();
CpuMemoryCacheStats cpu_memory_cache_stats();

}  // namespace frugal
