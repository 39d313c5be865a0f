// Overhead of the Trainer with all policies off against a hand-written LibTorch loop doing the
// same work (same model, data, batch order and optimizer), measured in one process with the two
// interleaved round by round so that machine noise hits both alike. Reports the median ratio.
//
//   build/bench/frugal_bench_overhead [results.jsonl] [rounds]

#include <iostream>

#include "bench_result.hpp"
#include "mlp_workload.hpp"

namespace {

using namespace frugal::bench;
constexpr int64_t kBatch = 64;

// Seconds per step of the hand-written loop: consecutive slices, no shuffling.
double hand_loop(const torch::Tensor& x, const torch::Tensor& y) {
  auto model = make_mlp();
  auto optimizer = make_sgd(*model);
  const double start = thread_cpu_seconds();
  int64_t steps = 0;
  for (int64_t begin = 0; begin < kExamples; begin += kBatch, ++steps) {
    auto index = torch::arange(begin, begin + kBatch, torch::kLong);
    auto input = x.index_select(0, index), target = y.index_select(0, index);
    optimizer->zero_grad(true);
    auto loss = torch::cross_entropy_loss(model->forward(input), target);
    loss.backward();
    optimizer->step();
  }
  return (thread_cpu_seconds() - start) / static_cast<double>(steps);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : "build/bench/results.jsonl";
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 15;
  const Workload w = make_workload();
  const auto c = compare_interleaved(
      rounds, [&] { return hand_loop(w.x, w.y); }, [&] { return seconds_per_step(*make_trainer(make_mlp(), w.data, kBatch)); });
  append(out, {"trainer_overhead_step_time", c.candidate * 1e3, "ms/step", c.baseline * 1e3,
               "bench/run (build/bench/frugal_bench_overhead)"});
  std::cout << "median of per-round ratios " << c.ratio << " over " << rounds << " rounds of " << kExamples / kBatch
            << " steps\n";
  return 0;
}
