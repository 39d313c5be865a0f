#include "data/detail/batch_prefetcher.hpp"

#include <c10/util/StringUtil.h>

#include "data/detail/intra_op_limit.hpp"
#include "frugal/errors.hpp"

namespace frugal::detail {

BatchPrefetcher::BatchPrefetcher(int64_t workers, int64_t depth, int64_t threads_per_worker) : depth_(depth) {
  threads_.reserve(static_cast<size_t>(workers));
  for (int64_t i = 0; i < workers; ++i) threads_.emplace_back([this, threads_per_worker] { work(threads_per_worker); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

void BatchPrefetcher::start(MakeBatch make, int64_t first, int64_t end) {
  cancel();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    make_ = std::make_shared<const MakeBatch>(std::move(make));
    next_ = taken_ = first;
    end_ = end;
  }
  changed_.notify_all();
}

void BatchPrefetcher::cancel() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++generation_;
  make_.reset();
  ready_.clear();
  next_ = end_ = taken_ = 0;
  changed_.wait(lock, [this] { return in_flight_ == 0; });
}

bool BatchPrefetcher::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return make_ != nullptr;
}

PreparedBatch BatchPrefetcher::take(int64_t index) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!make_ || index != taken_ || index >= end_) {
    throw Error(c10::str("BatchPrefetcher: batch ", index, " asked for, but the next one is ", taken_, " of ", end_));
  }
  changed_.wait(lock, [&] { return ready_.count(index) != 0; });
  auto result = std::move(ready_.at(index));
  ready_.erase(index);
  taken_ = index + 1;
  lock.unlock();
  changed_.notify_all();
  if (auto* error = std::get_if<std::exception_ptr>(&result)) std::rethrow_exception(*error);
  return std::get<PreparedBatch>(std::move(result));
}

void BatchPrefetcher::work(int64_t threads) {
  const IntraOpLimit limit(threads);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return shutdown_ || (make_ && next_ < end_ && next_ < taken_ + depth_); });
    if (shutdown_) return;
    const int64_t index = next_++;
    const uint64_t generation = generation_;
    const auto make = make_;
    ++in_flight_;
    lock.unlock();
    std::variant<PreparedBatch, std::exception_ptr> result;
    try {
      result = (*make)(index);
    } catch (...) {
      result = std::current_exception();
    }
    lock.lock();
    --in_flight_;
    if (generation == generation_) ready_.emplace(index, std::move(result));
    changed_.notify_all();
  }
}

}  // namespace frugal::detail
