#pragma once
// Caps the ATen intra-op threads of the calling thread only. A loader worker that runs large
// tensor ops (an antialiased resize, a batch copy) would otherwise start a parallel team as wide
// as the machine for each op: N workers x all cores of spinning OpenMP threads, competing with
// each other and with the training thread (pytorch/pytorch#20156). at::set_num_threads cannot do
// this: it also changes the process-wide default that every new thread starts from.
//
//   detail::IntraOpLimit limit(1);   // in a worker thread: its ops run on this thread alone

#include <c10/util/ParallelGuard.h>

#include <cstdint>
#include <optional>

namespace frugal::detail {

class IntraOpLimit {
 public:
  /// threads >= 1: this thread's ops use at most that many threads; 0: leaves the thread as it is.
  explicit IntraOpLimit(int64_t threads);
  ~IntraOpLimit();
  IntraOpLimit(const IntraOpLimit&) = delete;
  IntraOpLimit& operator=(const IntraOpLimit&) = delete;

 private:
  int previous_ = 0;  // the thread's OpenMP team size before; 0 = unchanged
  std::optional<c10::ParallelGuard> serial_;
};

}  // namespace frugal::detail
