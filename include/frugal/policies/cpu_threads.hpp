#pragma once
// Sizes the training thread's ATen intra-op pool for the run, after the CPU smoke test (which
// keeps every core) and until the fit ends. On a GPU the training thread mostly launches kernels,
// while the loader's workers decode on the CPU: a pool as wide as the machine would only compete
// with them. Automatic (threads = 0): on CUDA with loader workers, the cores the workers leave
// (at least 1); on the CPU, unchanged, since there the training thread does the work.
//
//   trainer.add_policy(std::make_shared<frugal::CpuThreadsPolicy>(0));   // add_policies does this
//   ... --trainer.cpu_threads=4 sets the pool to 4 threads for the run

#include <cstdint>
#include <string>

#include "frugal/core/policy.hpp"

namespace frugal {

struct DataLoaderOptions;

class CpuThreadsPolicy : public Policy {
 public:
  /// threads >= 1: the training thread's pool during the fit; 0: automatic.
  explicit CpuThreadsPolicy(int64_t threads = 0);
  /// OptionError naming cpu_threads unless threads >= 0.
  static void check(int64_t threads);
  std::string name() const override { return "cpu_threads"; }
  PolicyPhase phase() const override { return PolicyPhase::environment; }
  void on_fit_begin(const TrainingRun& run) override;
  void on_fit_end(const TrainingRun& run) override;

  /// The automatic size: on CUDA with workers, `cores` less what the workers use (at least 1);
  /// otherwise `cores`.
  static int64_t automatic(bool on_cuda, const DataLoaderOptions& data, int64_t cores);
  /// The pool size this policy set for the fit (0 before it began).
  int64_t threads_in_fit() const { return in_fit_; }

 private:
  int64_t threads_;
  int64_t in_fit_ = 0;
  int64_t before_ = 0;
};

}  // namespace frugal
