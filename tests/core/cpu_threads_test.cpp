// CpuThreadsPolicy: the training thread's intra-op pool during the fit, automatic or set.
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

// Records the training thread's pool size at each step.
struct PoolWatcher : Policy {
  std::string name() const override { return "pool_watcher"; }
  void on_step_begin(StepContext&) override { seen.push_back(at::get_num_threads()); }
  std::vector<int> seen;
};

}  // namespace

TEST_CASE("trainer.cpu_threads sizes the training thread's pool for the fit and restores it after", "[core][threads]") {
  const int before = at::get_num_threads();
  Model model(TinyNet(4, 8, 3).ptr(), cross_entropy());
  Trainer trainer(model, sgd(), blobs(32), TrainerOptions().device("cpu").run_dir("").max_epochs(1),
                  DataLoaderOptions().batch_size(8));
  auto threads = std::make_shared<CpuThreadsPolicy>(1);
  auto watcher = std::make_shared<PoolWatcher>();
  trainer.add_policy(threads);
  trainer.add_policy(watcher);
  trainer.fit();
  REQUIRE(watcher->seen.size() == 4);
  CHECK(watcher->seen.front() == 1);
  CHECK(threads->threads_in_fit() == 1);
  CHECK(at::get_num_threads() == before);

  // Automatic: on a GPU the workers' cores are left to them; on the CPU the pool stays whole.
  const auto workers = DataLoaderOptions().num_workers(12).worker_threads(1);
  CHECK(CpuThreadsPolicy::automatic(true, workers, 16) == 4);
  CHECK(CpuThreadsPolicy::automatic(true, DataLoaderOptions().num_workers(16), 16) == 1);
  CHECK(CpuThreadsPolicy::automatic(true, DataLoaderOptions().num_workers(4).worker_threads(2), 16) == 8);
  CHECK(CpuThreadsPolicy::automatic(true, DataLoaderOptions().num_workers(0), 16) == 16);
  CHECK(CpuThreadsPolicy::automatic(false, workers, 16) == 16);
  CHECK_THROWS_WITH(CpuThreadsPolicy(-2), Catch::Contains("cpu_threads must be >= 0"));
  CHECK_THROWS_WITH(CpuThreadsPolicy::check(-1), Catch::Contains("cpu_threads must be >= 0"));
}
