#pragma once
// Worker threads that make batches ahead of the consumer, at most `depth` beyond the last one
// taken. Batches are handed out strictly by index, so what the consumer sees never depends on
// how many workers there are or which finished first. Each worker caps its own intra-op threads,
// so N workers do not start N parallel teams as wide as the machine.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "data/detail/device_copy.hpp"

namespace frugal::detail {

class BatchPrefetcher {
 public:
  using MakeBatch = std::function<PreparedBatch(int64_t batch_index)>;

  /// Each worker's ATen ops use at most `threads_per_worker` threads (0: the process's setting).
  BatchPrefetcher(int64_t workers, int64_t depth, int64_t threads_per_worker = 0);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  /// Starts making batches [first, end) with `make`, after cancelling what was in flight.
  void start(MakeBatch make, int64_t first, int64_t end);
  /// Waits for batch `index` (the next in order) and returns it, or rethrows what making it threw.
  PreparedBatch take(int64_t index);
  /// Drops queued batches and waits for the ones being made (their results are discarded).
  void cancel();
  bool running() const;

 private:
  void work(int64_t threads);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::thread> threads_;
  std::shared_ptr<const MakeBatch> make_;
  int64_t depth_;
  int64_t next_ = 0;      // next batch a worker will start
  int64_t end_ = 0;
  int64_t taken_ = 0;     // first batch not yet taken
  int64_t in_flight_ = 0;
  uint64_t generation_ = 0;
  bool shutdown_ = false;
  std::map<int64_t, std::variant<PreparedBatch, std::exception_ptr>> ready_;
};

}  // namespace frugal::detail
