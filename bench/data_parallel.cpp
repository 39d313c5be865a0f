// Data-parallel benchmarks, launched by torchrun (bench/run: 2 CPU processes over gloo; the GPU
// check: NCCL). Rank 0 appends the results.
//   allreduce: bus bandwidth of one all-reduce by message size (nccl-tests' definition:
//              bytes x 2(n-1)/n / time), against copying the same bytes in memory here
//   step:      time of one training step of the benchmark MLP with the DataParallelPolicy
//              (buckets overlapped with backward, and not), against the same step alone
//
//   torchrun --standalone --nproc-per-node=2 --no-python build/bench/frugal_bench_data_parallel OUT.jsonl [cpu|cuda] [gloo|nccl]
#include <c10/util/StringUtil.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "bench_result.hpp"
#include "mlp_workload.hpp"

namespace {

using namespace frugal;
using Clock = std::chrono::steady_clock;

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Median seconds of `reps` runs of `body`, after two warm-up runs.
template <class Body>
double median_seconds(int reps, const torch::Device& device, Body body) {
  std::vector<double> times;
  for (int i = 0; i < reps + 2; ++i) {
    synchronize(device);
    const auto start = Clock::now();
    body();
    synchronize(device);
    if (i >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return bench::median(times);
}

void bench_allreduce(Communicator& comm, const torch::Device& device, const std::string& out, const std::string& command) {
  const double n = static_cast<double>(comm.world_size());
  const double bus_factor = n > 1 ? 2.0 * (n - 1.0) / n : 1.0;
  for (int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
    torch::Tensor flat = torch::ones({bytes / 4}, torch::TensorOptions().dtype(torch::kFloat).device(device));
    torch::Tensor copy_target = torch::empty_like(flat);
    const int reps = bytes >= (16 << 20) ? 5 : 20;
    const double reduce = median_seconds(reps, device, [&] { comm.start_all_reduce(flat)->wait(); });
    const double copy = median_seconds(reps, device, [&] { copy_target.copy_(flat); });
    const double bus_gbps = static_cast<double>(bytes) * bus_factor / reduce / 1e9;
    const double copy_gbps = static_cast<double>(bytes) / copy / 1e9;
    if (comm.rank() == 0) {
      bench::append(out, {c10::str("allreduce_bus_bandwidth_", comm.backend(), "_", comm.world_size(), "ranks_", bytes >> 10, "KiB"),
                          bus_gbps, "GB/s (baseline: memory copy of the same bytes)", copy_gbps, command});
      std::cout << "all-reduce " << (bytes >> 10) << " KiB: " << reduce * 1e6 << " us, bus " << bus_gbps << " GB/s (copy "
                << copy_gbps << " GB/s)" << std::endl;
    }
  }
}

// Seconds per optimizer step of a fit of `steps` steps with batch 64, data-parallel or alone.
double step_seconds(const std::shared_ptr<Communicator>& comm, bool overlap, double bucket_mb, const torch::Device& device,
                    const bench::Workload& w, int64_t steps) {
  auto model = bench::make_mlp();
  Model wrapped(model.ptr(), LossFn<torch::nn::SequentialImpl>([](torch::nn::SequentialImpl& m, const Batch& b) {
                  return torch::cross_entropy_loss(m.forward(b.input), b.target);
                }));
  Trainer trainer(wrapped, bench::make_sgd, w.data,
                  TrainerOptions().device(device.str()).run_dir("").log_every_n_steps(1000000).max_steps(steps),
                  DataLoaderOptions().batch_size(64).shuffle(false));
  if (comm) {
    add_data_parallel(trainer, std::make_shared<DataParallelPolicy>(comm, DataParallelOptions().bucket_cap_mb(bucket_mb).overlap(overlap)));
  }
  synchronize(device);
  const auto start = Clock::now();
  const auto result = trainer.fit();
  synchronize(device);
  return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(result.state.step);
}

void bench_step(const std::shared_ptr<Communicator>& comm, const torch::Device& device, const std::string& out,
                const std::string& command) {
  const bench::Workload w = bench::make_workload();
  // The model's 1.6 MB of gradients make one bucket at the default 25 MB; 0.25 MB buckets (7)
  // measure what overlapping them with backward gains. Every rank runs the same rounds.
  const auto whole = bench::compare_interleaved(5, [&] { return step_seconds(nullptr, true, 25.0, device, w, 30); },
                                                [&] { return step_seconds(comm, true, 25.0, device, w, 30); });
  const auto overlap = bench::compare_interleaved(5, [&] { return step_seconds(comm, false, 0.25, device, w, 30); },
                                                  [&] { return step_seconds(comm, true, 0.25, device, w, 30); });
  if (comm->rank() != 0) return;
  const std::string suffix = c10::str("_", comm->backend(), "_", comm->world_size(), "ranks");
  bench::append(out, {"data_parallel_step" + suffix, whole.candidate * 1e3, "ms/step (baseline: the same step alone)",
                      whole.baseline * 1e3, command});
  bench::append(out, {"data_parallel_overlap" + suffix, overlap.candidate * 1e3,
                      "ms/step, 0.25 MB buckets (baseline: all reduced after backward)", overlap.baseline * 1e3, command});
  std::cout << "step: alone " << whole.baseline * 1e3 << " ms, data-parallel " << whole.candidate * 1e3
            << " ms (one bucket); 0.25 MB buckets: " << overlap.candidate * 1e3 << " ms overlapped, "
            << overlap.baseline * 1e3 << " ms after backward" << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: frugal_bench_data_parallel OUT.jsonl [cpu|cuda] [gloo|nccl]\n";
    return 2;
  }
  try {
    const std::string out = argv[1], device_name = argc > 2 ? argv[2] : "cpu", backend = argc > 3 ? argv[3] : "gloo";
    if (device_name == "cuda" && !torch::cuda::is_available()) {
      std::cout << "SKIPPED: no CUDA device here\n";
      return 0;
    }
    const World world = detect_world(process_environment());
    const torch::Device device = device_name == "cuda" ? torch::Device(torch::kCUDA, world.local_rank) : torch::Device(torch::kCPU);
    torch::set_num_threads(1);
    auto comm = connect(world, CommunicatorOptions().backend(parse_enum_option<CollectiveBackend>(backend, "backend")).timeout_seconds(120));
    const std::string command = c10::str("torchrun --standalone --nproc-per-node=", world.world_size,
                                         " --no-python build/bench/frugal_bench_data_parallel ", out, " ", device_name, " ", backend);
    bench_allreduce(*comm, device, out, command);
    bench_step(comm, device, out, command);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "frugal_bench_data_parallel: " << e.what() << "\n";
    return 1;
  }
}
