// What the efficiency tooling costs the training loop, each against the bare Trainer on the
// same work in the same process, interleaved round by round (bench/mlp_workload.hpp):
//   - a policy that does nothing (control: hook dispatch and the noise floor);
//   - the profiler policy while idle (no capture due), against that empty policy: goal ~0;
//   - the profiler capturing 3 of the epoch's 64 steps, averaged over the epoch;
//   - throughput, cost and progress policies together (figures at every 10th step);
//   - the recovery ladder while nothing goes wrong (defaults: the loss and gradient norm read at
//     every step, a snapshot at the start and every 50 steps), against the empty policy.
//
//   build/bench/frugal_bench_tooling [results.jsonl] [rounds] [profile dir]

#include <iostream>

#include "bench_result.hpp"
#include "mlp_workload.hpp"

namespace {

using namespace frugal;
using namespace frugal::bench;
constexpr int64_t kBatch = 64;

// Seconds per step of one fit of the bare Trainer plus `policies`, logging every `log_every` steps
// (no run directory: nothing is written).
double run(const Workload& w, const std::vector<std::shared_ptr<Policy>>& policies, int64_t log_every = 1000000) {
  auto model = make_mlp();
  Model wrapped(model.ptr(), LossFn<torch::nn::SequentialImpl>([](torch::nn::SequentialImpl& m, const Batch& b) {
                  return torch::cross_entropy_loss(m.forward(b.input), b.target);
                }));
  Trainer trainer(wrapped, make_sgd, w.data, TrainerOptions().device("cpu").run_dir("").log_every_n_steps(log_every),
                  DataLoaderOptions().batch_size(kBatch).shuffle(false));
  for (const auto& p : policies) trainer.add_policy(p);
  return seconds_per_step(trainer);
}

// A policy that does nothing: the cost of the Trainer's hook calls themselves.
struct EmptyPolicy : Policy {
  std::string name() const override { return "empty"; }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : "build/bench/results.jsonl";
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 15;
  const std::string profiles = argc > 3 ? argv[3] : "build/bench/profiles";
  const Workload w = make_workload();
  const std::string command = "bench/run (build/bench/frugal_bench_tooling)";

  // Control: a policy that does nothing, against none (the hook dispatch, and the noise floor).
  const auto empty = compare_interleaved(rounds, [&] { return run(w, {}); }, [&] { return run(w, {std::make_shared<EmptyPolicy>()}); });
  append(out, {"empty_policy_step_time", empty.candidate * 1e3, "ms/step", empty.baseline * 1e3, command});
  std::cout << "empty policy: median ratio " << empty.ratio << "\n";
  // The idle profiler against the empty policy: what the profiler's own checks cost.
  const auto idle = compare_interleaved(
      rounds, [&] { return run(w, {std::make_shared<EmptyPolicy>()}); },
      [&] { return run(w, {std::make_shared<ProfilerPolicy>(ProfilerOptions().every_n_steps(1000000).dir(profiles))}); });
  append(out, {"profiler_idle_step_time", idle.candidate * 1e3, "ms/step", idle.baseline * 1e3, command});
  std::cout << "profiler idle: median ratio " << idle.ratio << "\n";

  const auto active = compare_interleaved(rounds, [&] { return run(w, {}); }, [&] {
    return run(w, {std::make_shared<ProfilerPolicy>(ProfilerOptions().every_epoch(true).skip_steps(5).steps(3).top(5).dir(profiles))});
  });
  append(out, {"profiler_one_capture_per_64_steps_step_time", active.candidate * 1e3, "ms/step", active.baseline * 1e3, command});
  std::cout << "profiler capturing 3 of 64 steps: median ratio " << active.ratio << "\n";

  const auto figures = compare_interleaved(
      rounds, [&] { return run(w, {}, 10); },
      [&] {
        return run(w,
                   {std::make_shared<ThroughputPolicy>(ThroughputOptions().flops_per_sample(1e6).peak_tflops(1)),
                    std::make_shared<CostPolicy>(CostOptions().price_per_device_hour(2.5)),
                    std::make_shared<ProgressPolicy>(ProgressOptions().log_every_seconds(0))},
                   10);
      });
  append(out, {"throughput_cost_progress_step_time", figures.candidate * 1e3, "ms/step", figures.baseline * 1e3, command});
  std::cout << "throughput + cost + progress: median ratio " << figures.ratio << "\n";
  const auto recovery = compare_interleaved(
      rounds, [&] { return run(w, {std::make_shared<EmptyPolicy>()}); },
      [&] { return run(w, {std::make_shared<RecoveryPolicy>()}); });
  append(out, {"recovery_idle_step_time", recovery.candidate * 1e3, "ms/step", recovery.baseline * 1e3, command});
  std::cout << "recovery ladder idle: median ratio " << recovery.ratio << "\n";
  return 0;
}
