// The automatic batch size: the search against a known memory limit, a simulated out-of-memory
// error, the cache, and the Trainer integration that keeps the effective batch.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

constexpr int64_t kMiB = 1 << 20;

// A trial whose step needs n MiB (a real CPU allocation, counted by the meter).
struct MiBPerSample {
  std::vector<int64_t> calls;
  void operator()(int64_t n) {
    calls.push_back(n);
    torch::Tensor block = torch::empty({n * kMiB}, torch::kUInt8);
    block.fill_(1);
  }
};

void check_answer_was_tried(const BatchSizeSearch& search) {
  bool tried_and_fit = false;
  for (const auto& t : search.trials) tried_and_fit = tried_and_fit || (t.batch_size == search.batch_size && t.fits);
  CHECK(tried_and_fit);
}

}  // namespace

TEST_CASE("the search finds the largest size under the memory limit with its margin", "[tooling][batch_size]") {
  MiBPerSample trial;
  const auto search = find_batch_size(std::ref(trial), torch::kCPU, BatchSizeFinderOptions().cpu_memory_limit_mb(100).margin(0.1));
  CHECK(search.batch_size == 90);  // peak n MiB <= 90% of 100 MiB
  check_answer_was_tried(search);
  // Doubling to the first failure, then bisection.
  CHECK(trial.calls == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 96, 80, 88, 92, 90, 91});
  for (const auto& t : search.trials) CHECK(t.fits == (t.batch_size <= 90));
  CHECK(search.trials.back().why == "peak above 90% of the memory");
}

TEST_CASE("the search respects max and multiple_of", "[tooling][batch_size]") {
  MiBPerSample capped;
  const auto at_max = find_batch_size(std::ref(capped), torch::kCPU, BatchSizeFinderOptions().cpu_memory_limit_mb(100).max(50));
  CHECK(at_max.batch_size == 50);
  CHECK(*std::max_element(capped.calls.begin(), capped.calls.end()) == 50);  // never tried above max
  check_answer_was_tried(at_max);
  MiBPerSample multiples;
  const auto by_8 = find_batch_size(std::ref(multiples), torch::kCPU,
                                    BatchSizeFinderOptions().cpu_memory_limit_mb(100).multiple_of(8).start(3));
  CHECK(by_8.batch_size == 88);
  for (int64_t n : multiples.calls) CHECK(n % 8 == 0);
  check_answer_was_tried(by_8);
}

TEST_CASE("an out-of-memory error from the step counts as not fitting", "[tooling][batch_size]") {
  std::vector<int64_t> calls;
  auto trial = [&](int64_t n) {
    calls.push_back(n);
    TORCH_CHECK_WITH(OutOfMemoryError, n <= 37, "simulated: CUDA out of memory at batch ", n);
  };
  const auto search = find_batch_size(trial, torch::kCPU, BatchSizeFinderOptions().max(1000));
  CHECK(search.batch_size == 37);
  check_answer_was_tried(search);
  CHECK(std::find(calls.begin(), calls.end(), 38) != calls.end());  // its neighbour above was tried and failed
  auto never = [](int64_t n) { TORCH_CHECK_WITH(OutOfMemoryError, false, "simulated OOM at ", n); };
  CHECK_THROWS_WITH(find_batch_size(never, torch::kCPU, BatchSizeFinderOptions().start(4)),
                    Catch::Contains("even the smallest size, 4, does not fit") && Catch::Contains("out of memory"));
  // Other errors are not memory: they surface.
  auto broken = [](int64_t) { throw std::runtime_error("shape mismatch"); };
  CHECK_THROWS_WITH(find_batch_size(broken, torch::kCPU, BatchSizeFinderOptions()), "shape mismatch");
}

TEST_CASE("results are cached per key and reused without probing", "[tooling][batch_size]") {
  const auto dir = scratch_dir("batch_size_cache");
  const auto options = BatchSizeFinderOptions().cpu_memory_limit_mb(100).cache_file((dir / "sizes.json").string());
  MiBPerSample first, second, other_key, other_limit;
  CHECK(find_batch_size(std::ref(first), torch::kCPU, options, "model-a").batch_size == 90);
  const auto again = find_batch_size(std::ref(second), torch::kCPU, options, "model-a");
  CHECK(again.from_cache);
  CHECK(again.batch_size == 90);
  CHECK(second.calls.empty());
  CHECK_FALSE(find_batch_size(std::ref(other_key), torch::kCPU, options, "model-b").from_cache);
  CHECK_FALSE(other_key.calls.empty());
  // Another memory limit is another question.
  auto smaller = options;
  smaller.cpu_memory_limit_mb(50);
  CHECK(find_batch_size(std::ref(other_limit), torch::kCPU, smaller, "model-a").batch_size == 45);
  // A damaged cache is ignored (with a warning) and rewritten.
  std::ofstream(dir / "sizes.json") << "{not json";
  MiBPerSample after_damage;
  CHECK(find_batch_size(std::ref(after_damage), torch::kCPU, options, "model-a").batch_size == 90);
  CHECK_FALSE(after_damage.calls.empty());
  CHECK(nlohmann::json::parse(bytes_of(dir / "sizes.json")).is_object());
}

TEST_CASE("the effective batch is kept exactly when the micro-batch changes", "[tooling][batch_size]") {
  CHECK(keep_effective_batch(64, 8) == std::pair<int64_t, int64_t>{8, 8});
  CHECK(keep_effective_batch(64, 20) == std::pair<int64_t, int64_t>{16, 4});
  CHECK(keep_effective_batch(64, 100) == std::pair<int64_t, int64_t>{64, 1});
  CHECK(keep_effective_batch(63, 10) == std::pair<int64_t, int64_t>{9, 7});
  CHECK(keep_effective_batch(13, 5) == std::pair<int64_t, int64_t>{1, 13});
}

namespace {
// An MLP wide enough that activations dominate: memory grows with the batch.
struct WideNetImpl : torch::nn::Cloneable<WideNetImpl> {
  WideNetImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(64, 2048));
    fc2 = register_module("fc2", torch::nn::Linear(2048, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(WideNet);
}  // namespace

TEST_CASE("add_policies probes the Trainer's model, restores it and keeps the effective batch", "[tooling][batch_size]") {
  Seeded seeded;
  const auto dir = scratch_dir("auto_batch_trainer");
  WideNet net;
  auto data = std::make_shared<TensorDataset>(torch::randn({512, 64}), torch::randint(0, 3, {512}));
  StandardOptions options;
  options.trainer.device("cpu").run_dir("").max_steps(2);
  options.data.batch_size(8);
  options.smoke_test.mode(SmokeTestMode::off);
  options.accumulation.steps(8);  // effective 64
  options.auto_batch_enabled = true;
  options.auto_batch.cpu_memory_limit_mb(40).cache_file((dir / "cache.json").string());
  options.progress_enabled = false;
  Trainer trainer(Model(net.ptr(), LossFn<WideNetImpl>([](WideNetImpl& n, const Batch& b) {
                    return torch::cross_entropy_loss(n.forward(b.input), b.target);
                  })),
                  sgd(), data, options.trainer, options.data);
  const torch::Tensor before = flat_parameters(*net);
  ProbeBatch probe{[](int64_t n) { return Batch{torch::randn({n, 64}), torch::randint(0, 3, {n}), {}}; }, "64 features"};
  add_policies(trainer, options, "", probe);
  // 8 KiB of activations per sample and 0.5 MiB of weights: the search ends well above 8.
  CHECK(options.data.batch_size() > 8);
  CHECK(options.data.batch_size() * options.accumulation.steps() == 64);
  CHECK(trainer.data_options().batch_size() == options.data.batch_size());
  CHECK(torch::equal(flat_parameters(*net), before));  // the trials' optimizer steps were undone
  for (const auto& p : net->parameters()) CHECK_FALSE(p.grad().defined());
  const auto cache = nlohmann::json::parse(bytes_of(dir / "cache.json"));
  REQUIRE(cache.size() == 1);
  CHECK_THAT(cache.begin().key(), Catch::Contains("|cpu|fp32|world 1|64 features|optimizer torch::optim::SGD|memory 40 MiB"));
  trainer.fit();
  CHECK(trainer.state().micro_step == 2 * options.accumulation.steps());
  // Without a probe the program cannot use it.
  Trainer other(Model(WideNet().ptr(), LossFn<WideNetImpl>([](WideNetImpl& n, const Batch& b) {
                  return torch::cross_entropy_loss(n.forward(b.input), b.target);
                })),
                sgd(), data, options.trainer, options.data);
  CHECK_THROWS_WITH(add_policies(other, options), Catch::Contains("gives no probe batch"));
}
