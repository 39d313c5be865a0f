// Loader workers that scale: each worker's tensor work on data.worker_threads threads, batches
// collated into reused buffers that are never handed out while a batch still uses them.
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "support/fixtures.hpp"
#include "support/shards.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

int64_t threads_in_process() {
  return std::distance(std::filesystem::directory_iterator("/proc/self/task"), std::filesystem::directory_iterator());
}

// Each fetch runs one large ATen op, as a decoder's resize or the collate's copies do, then
// records how many threads the process has and the thread's own pool size. A worker whose op
// runs on a parallel team has made that team's threads by then.
class ThreadCountingDataset : public Dataset {
 public:
  int64_t size() const override { return 64; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    torch::Tensor big = torch::ones({int64_t{1} << 22});
    big.mul_(2);  // above ATen's grain size: parallel unless the thread is capped
    const int64_t threads = threads_in_process();
    const std::lock_guard<std::mutex> lock(mutex_);
    most_threads_ = std::max(most_threads_, threads);
    widest_pool_ = std::max(widest_pool_, at::get_num_threads());
    return {torch::tensor(indices, torch::kLong), torch::Tensor(), {}};
  }
  int64_t most_threads() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return most_threads_;
  }
  int widest_pool() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return widest_pool_;
  }

 private:
  mutable std::mutex mutex_;
  mutable int64_t most_threads_ = 0;
  mutable int widest_pool_ = 0;
};

struct Team {
  int64_t extra_threads;  // threads beyond the process's before and the workers themselves
  int pool;               // the widest intra-op pool a worker had
};

Team worker_team(int64_t workers, int64_t worker_threads) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the previous loader's threads have exited
  const int64_t before = threads_in_process();
  auto data = std::make_shared<ThreadCountingDataset>();
  {
    DataLoader loader(data, DataLoaderOptions().batch_size(8).shuffle(false).num_workers(workers).worker_threads(worker_threads));
    while (loader.next()) {
    }
  }
  return {data->most_threads() - before - workers, data->widest_pool()};
}

}  // namespace

TEST_CASE("a loader worker's tensor work runs on data.worker_threads threads, not the whole machine", "[data][loader]") {
  const int threads_before = at::get_num_threads();
  at::set_num_threads(2);  // as a 2-core machine has it by default: a parallel team of 2 is possible
  const Team capped = worker_team(2, 1);
  const Team uncapped = worker_team(2, 0);
  const Team two = worker_team(1, 2);
  at::set_num_threads(threads_before);
  INFO("extra threads: capped " << capped.extra_threads << ", uncapped " << uncapped.extra_threads << ", 2 per worker " << two.extra_threads);
  // worker_threads = 1: no worker starts a team, its ops run on the worker alone.
  CHECK(capped.pool == 1);
  CHECK(capped.extra_threads == 0);
  // worker_threads = 0 keeps the process's setting: every worker starts a team of its own (the
  // oversubscription of 16 workers x 16 cores); this shows the check above can fail.
  CHECK(uncapped.pool == 2);
  CHECK(uncapped.extra_threads >= 1);
  CHECK(two.pool == 2);
  CHECK(two.extra_threads == 1);
  // The cap is the worker's own: the caller's thread keeps its pool.
  CHECK(at::get_num_threads() == threads_before);
  CHECK_THROWS_WITH(DataLoaderOptions().worker_threads(-1).validate(), Catch::Contains("worker_threads must be >= 0, got -1"));
}

TEST_CASE("batches are collated into reused buffers, and a batch still held is never overwritten", "[data][loader]") {
  const auto dir = scratch_dir("loader_buffers");
  write_numbered_shards(dir, 64);
  auto data = std::make_shared<ShardedDataset>(dir, numbered_decoder());
  for (const int64_t workers : {0, 2}) {
    INFO(workers << " workers");
    DataLoader loader(data, DataLoaderOptions().batch_size(8).shuffle(false).num_workers(workers).prefetch_batches(2));
    // Batches dropped at once: their memory comes back for later batches.
    std::set<const void*> addresses;
    for (int i = 0; i < 4; ++i) addresses.insert(loader.next()->input.data_ptr());
    CHECK(addresses.size() < 4);
    // A batch kept (and a view of one) keeps its numbers while later batches are made.
    loader.start_epoch(0);
    const Batch kept = *loader.next();
    const torch::Tensor view = loader.next()->input.slice(0, 2, 4);
    std::vector<int64_t> expected(8);
    std::iota(expected.begin(), expected.end(), int64_t{0});
    while (auto b = loader.next()) {
      CHECK(b->input.data_ptr() != kept.input.data_ptr());
      CHECK(b->input.data_ptr() != view.data_ptr());
    }
    CHECK(numbers_of(kept) == expected);
    CHECK(view.select(1, 0).to(torch::kLong).equal(torch::tensor({10, 11}, torch::kLong)));
    CHECK(kept.target.equal(torch::tensor({0, 1, 2, 0, 1, 2, 0, 1}, torch::kLong)));
  }
  // The same batches as stacking would give, layout included: a CHW view of HWC memory makes a
  // channels-last batch.
  std::vector<Batch> examples;
  for (int i = 0; i < 3; ++i) examples.push_back({torch::full({5, 4, 3}, i, torch::kUInt8).permute({2, 0, 1}), torch::tensor(i), {}});
  const Batch stacked = collate(examples);
  CHECK(stacked.input.is_contiguous(torch::MemoryFormat::ChannelsLast));
  CHECK(stacked.input.equal(torch::stack({examples[0].input, examples[1].input, examples[2].input})));
  examples[1].input = torch::zeros({3, 5, 5}, torch::kUInt8);
  CHECK_THROWS_WITH(collate(examples), Catch::Contains("example 1 is") && Catch::Contains("example 0 is"));
}
