// The CPU memory cache: blocks reused by size class, small ones left to malloc, the cap, the raw
// interface oneDNN uses, page faults saved, and the Trainer's switch (same results, on only during fit).
#include <catch2/catch.hpp>
#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>

#include "frugal/core/cpu_memory_cache.hpp"
#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Turns the cache on for one test and off (emptied) after it, whatever the test left.
struct CacheOn {
  explicit CacheOn(CpuMemoryCacheOptions options = {}) { enable_cpu_memory_cache(options); }
  ~CacheOn() { disable_cpu_memory_cache(); }
};

int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Minor page faults of `rounds` tensors of `bytes`, each written in full and freed.
int64_t faults_of_fresh_tensors(int64_t bytes, int rounds) {
  const int64_t before = minor_faults();
  for (int i = 0; i < rounds; ++i) torch::empty({bytes / 4}, torch::kFloat).fill_(1.0f);
  return minor_faults() - before;
}

}  // namespace

TEST_CASE("a freed block goes to the next tensor of its size class", "[core][cpu_memory_cache]") {
  CacheOn on;
  const CpuMemoryCacheStats start = cpu_memory_cache_stats();
  torch::Tensor a = torch::empty({kMiB});  // 4 MiB
  void* block = a.data_ptr();
  a.reset();
  CHECK(cpu_memory_cache_stats().cached_bytes == start.cached_bytes + 4 * kMiB);
  // 100 floats fewer rounds up to the same class (steps of 1/8 of 4 MiB).
  const torch::Tensor b = torch::empty({kMiB - 100});
  CHECK(b.data_ptr() == block);
  const torch::Tensor c = torch::empty({kMiB});  // the block is taken: a new one
  CHECK(c.data_ptr() != block);
  const CpuMemoryCacheStats end = cpu_memory_cache_stats();
  CHECK(end.hits == start.hits + 1);
  CHECK(end.misses == start.misses + 2);
  CHECK(end.cached_bytes == start.cached_bytes);
}

TEST_CASE("a bigger class is not handed out for a smaller one, nor small blocks cached", "[core][cpu_memory_cache]") {
  CacheOn on;
  torch::Tensor a = torch::empty({2 * kMiB});  // 8 MiB
  void* block = a.data_ptr();
  a.reset();
  const CpuMemoryCacheStats start = cpu_memory_cache_stats();
  const torch::Tensor b = torch::empty({kMiB});  // 4 MiB: another class
  CHECK(b.data_ptr() != block);
  const torch::Tensor tiny = torch::empty({100});  // under min_block_bytes: malloc's, not counted
  const CpuMemoryCacheStats end = cpu_memory_cache_stats();
  CHECK(end.hits == start.hits);
  CHECK(end.misses == start.misses + 1);
}

TEST_CASE("the cache holds no more than max_cached_bytes", "[core][cpu_memory_cache]") {
  CacheOn on(CpuMemoryCacheOptions().max_cached_bytes(6 * kMiB));
  CHECK(cpu_memory_cache_stats().limit_bytes == 6 * kMiB);
  std::vector<torch::Tensor> tensors;
  for (int i = 0; i < 3; ++i) tensors.push_back(torch::empty({kMiB}));
  tensors.clear();  // three 4 MiB blocks freed: one is kept, two go back to the system
  CHECK(cpu_memory_cache_stats().cached_bytes == 4 * kMiB);
  empty_cpu_memory_cache();
  CHECK(cpu_memory_cache_stats().cached_bytes == 0);
}

TEST_CASE("disabled, the cache holds nothing and blocks in use are freed to the system", "[core][cpu_memory_cache]") {
  torch::Tensor live;
  {
    CacheOn on;
    torch::empty({kMiB});  // freed at once: cached
    live = torch::empty({kMiB});
    CHECK(cpu_memory_cache_enabled());
  }
  CHECK_FALSE(cpu_memory_cache_enabled());
  CHECK(cpu_memory_cache_stats().cached_bytes == 0);
  live.reset();
  CHECK(cpu_memory_cache_stats().cached_bytes == 0);
  const CpuMemoryCacheStats before = cpu_memory_cache_stats();
  torch::empty({kMiB});
  CHECK(cpu_memory_cache_stats().misses == before.misses);  // off: LibTorch's allocator, uncounted
}

TEST_CASE("oneDNN's raw_allocate / raw_deallocate work through the cache, also for blocks from before it", "[core][cpu_memory_cache]") {
  CacheOn on;
  c10::Allocator* allocator = c10::GetCPUAllocator();
  REQUIRE(allocator->raw_deleter() != nullptr);
  void* big = allocator->raw_allocate(4 * kMiB);
  void* small = allocator->raw_allocate(64);
  static_cast<char*>(big)[4 * kMiB - 1] = 1;
  static_cast<char*>(small)[63] = 1;
  allocator->raw_deallocate(small);
  const CpuMemoryCacheStats before = cpu_memory_cache_stats();
  allocator->raw_deallocate(big);
  CHECK(cpu_memory_cache_stats().cached_bytes == before.cached_bytes + 4 * kMiB);
  // Allocated by LibTorch's own allocator (as before the cache was installed), freed through the cache.
  void* earlier = c10::GetDefaultCPUAllocator()->raw_allocate(4 * kMiB);
  allocator->raw_deallocate(earlier);
  CHECK(cpu_memory_cache_stats().cached_bytes == before.cached_bytes + 4 * kMiB);
}

TEST_CASE("with the cache, a tensor allocated again is not faulted in again", "[core][cpu_memory_cache]") {
  // 64 MiB: above glibc's largest mmap threshold, so without the cache every one is mapped and
  // faulted in afresh (16384 faults of 4 KiB pages each; far fewer where transparent huge pages
  // back some of it, as on the GPU machine: hence a ratio, not a count).
  const int64_t bytes = 64 * kMiB, pages = bytes / 4096, rounds = 8;
  const int64_t without = faults_of_fresh_tensors(bytes, rounds);
  int64_t with = 0;
  {
    CacheOn on;
    with = faults_of_fresh_tensors(bytes, rounds);
  }
  INFO("faults without the cache " << without << ", with it " << with);
  CHECK(without > 4 * with);
  CHECK(with < 2 * pages);  // the first one only
}

TEST_CASE("the Trainer's cpu_memory_cache: on during fit, emptied after, the same weights as without", "[core][cpu_memory_cache]") {
  // Hidden width 8192: weights of 128 KiB and activations of 512 KiB, above min_block_bytes.
  struct Watch : Policy {
    std::string name() const override { return "watch"; }
    void on_step_begin(StepContext&) override {
      enabled = enabled && cpu_memory_cache_enabled();
      hits = cpu_memory_cache_stats().hits;
    }
    bool enabled = true;
    int64_t hits = 0;
  };
  auto train = [](bool cache, Watch& watch) {
    Seeded seeded;
    TinyNet net(4, 8192, 3);
    Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(64),
                    TrainerOptions().device("cpu").run_dir("").log_every_n_steps(1000).max_steps(6).cpu_memory_cache(cache),
                    DataLoaderOptions().batch_size(16));
    trainer.add_policy(std::shared_ptr<Policy>(&watch, [](Policy*) {}));
    const int64_t hits_before = cpu_memory_cache_stats().hits;
    trainer.fit();
    watch.hits -= hits_before;
    return flat_parameters(*net);
  };
  Watch on, off;
  const torch::Tensor cached = train(true, on);
  CHECK(on.enabled);
  CHECK(on.hits > 0);
  CHECK_FALSE(cpu_memory_cache_enabled());
  CHECK(cpu_memory_cache_stats().cached_bytes == 0);
  const torch::Tensor plain = train(false, off);
  CHECK_FALSE(off.enabled);
  CHECK(off.hits == 0);
  CHECK(torch::equal(cached, plain));
}
