#include "data/detail/intra_op_limit.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace frugal::detail {
namespace {

// The OpenMP runtime that LibTorch loaded (the wheel bundles its own libgomp), found at run time:
// linking one ourselves could bring in a second runtime. Absent with a non-OpenMP ATen build.
struct OpenMp {
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  SetThreads set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  GetThreads get = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  bool available() const { return set != nullptr && get != nullptr; }
};

const OpenMp& open_mp() {
  static const OpenMp runtime;
  return runtime;
}

}  // namespace

IntraOpLimit::IntraOpLimit(int64_t threads) {
  if (threads < 1) return;
  // LibTorch sets each thread's OpenMP team size from the process default on the thread's first
  // parallel op; have that happen now, or it would undo the cap on the first op.
  (void)at::get_num_threads();
  if (open_mp().available()) {
    previous_ = open_mp().get();
    // nthreads-var is an OpenMP per-thread setting: other threads keep theirs.
    open_mp().set(static_cast<int>(threads));
  }
  // at::parallel_for runs inline inside a ParallelGuard, whatever the backend.
  if (threads == 1) serial_.emplace(true);
}

IntraOpLimit::~IntraOpLimit() {
  serial_.reset();
  if (previous_ > 0) open_mp().set(previous_);
}

}  // namespace frugal::detail
