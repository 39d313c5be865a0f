#include "frugal/policies/cpu_threads.hpp"

#include <ATen/Parallel.h>
#include <c10/util/StringUtil.h>

#include <algorithm>

#include "frugal/core/training_run.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {

CpuThreadsPolicy::CpuThreadsPolicy(int64_t threads) : threads_(threads) { check(threads); }

void CpuThreadsPolicy::check(int64_t threads) {
  if (threads < 0) throw OptionError("cpu_threads", c10::str("cpu_threads must be >= 0 (0 = automatic), got ", threads));
}

int64_t CpuThreadsPolicy::automatic(bool on_cuda, const DataLoaderOptions& data, int64_t cores) {
  if (!on_cuda || data.num_workers() == 0) return cores;
  // A worker with worker_threads = 0 uses a whole team; count it as one busy core at least.
  const int64_t busy = data.num_workers() * std::max<int64_t>(1, data.worker_threads());
  return std::max<int64_t>(1, cores - busy);
}

void CpuThreadsPolicy::on_fit_begin(const TrainingRun& run) {
  before_ = at::get_num_threads();
  in_fit_ = threads_ > 0 ? threads_ : automatic(run.device().is_cuda(), run.data_options(), before_);
  if (in_fit_ == before_) return;
  at::set_num_threads(static_cast<int>(in_fit_));
  log::info(c10::str("training thread: ", in_fit_, " intra-op threads of ", before_,
                     threads_ > 0 ? " (trainer.cpu_threads)"
                                  : c10::str(" (the rest leaves ", run.data_options().num_workers(),
                                             " loader workers their cores; trainer.cpu_threads sets it)")));
}

void CpuThreadsPolicy::on_fit_end(const TrainingRun& /*run*/) {
  if (before_ > 0 && in_fit_ != before_) at::set_num_threads(static_cast<int>(before_));
}

}  // namespace frugal
