// Loader throughput with 2 workers making ResNet training batches (500x375 photo JPEGs, decode +
// RandomResizedCrop 224 + flip, batches of 32) while another thread keeps an intra-op pool busy,
// as the training thread does. Before: workers on the process's intra-op setting
// (data.worker_threads = 0) and the training pool as wide as the machine. After: one thread per
// worker and the training pool sized by CpuThreadsPolicy's automatic rule. Same process,
// alternating rounds, medians.
// - data.loader_busy_main_thread: samples/s after, before as the baseline;
// - data.loader_busy_vs_alone: after with the busy thread, against the loader alone;
// - data.loader_oversubscribed_16_threads: the same with 16 intra-op threads (an H200 host's 16
//   cores' default) on this machine: what 16 workers x 16 threads does to the cores;
// - data.loader_threads_started: threads the process gained while 2 workers ran, at 16 intra-op
//   threads, after against before;
// - data.collate_reused_buffer: collating 256 ResNet crops (CHW views of HWC memory) into a reused
//   batch buffer, against stacking them into a fresh tensor each batch (thread CPU time).
#include "loader_threads.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench_result.hpp"
#include "data/detail/batch_buffers.hpp"
#include "frugal/frugal.hpp"
#include "interleaved.hpp"
#include "synthetic_photo.hpp"

namespace fs = std::filesystem;

namespace frugal::bench {
namespace {

int64_t threads_in_process() { return std::distance(fs::directory_iterator("/proc/self/task"), fs::directory_iterator()); }

struct Setting {
  int64_t worker_threads;  // 0: the process's intra-op setting (before)
  int main_pool;           // the busy thread's pool; 0: no busy thread
};

struct Measured {
  double samples_per_second;
  int64_t threads_gained;
};

}  // namespace

void loader_threads_scaling(const std::string& results, const fs::path& dir, const std::string& command) {
  const int64_t samples = 256;
  {
    frugal::ShardWriter writer(dir / "photos", frugal::ShardWriterOptions().target_bytes(int64_t{8} << 20));
    for (int64_t i = 0; i < samples; ++i) {
      writer.write({std::to_string(1000000 + i),
                    {{"jpg", frugal::encode_jpeg(picture(static_cast<uint64_t>(i % 64), 375, 500), 90)}, {"cls", std::to_string(i % 10)}}});
    }
    writer.finish();
  }
  const auto transform = frugal::ImageTransformOptions().size(224).train(true);
  auto data = std::make_shared<frugal::ShardedDataset>(dir / "photos", [transform](const frugal::Sample& s, const frugal::SampleContext& c) {
    return frugal::Batch{frugal::decode_and_transform(s.field("jpg"), s.key, transform, c.sample_seed()),
                         torch::tensor(static_cast<int64_t>(std::stoll(s.field("cls")))), {}};
  });
  const int process_threads = at::intraop_default_num_threads();  // the machine's default, whatever main() set
  auto run = [&](const Setting& setting, int intra_op_threads) {
    at::set_num_threads(intra_op_threads);  // what new threads (workers) start from
    std::atomic<bool> stop{false};
    std::thread busy;
    if (setting.main_pool > 0) {
      busy = std::thread([&stop, pool = setting.main_pool] {
        at::set_num_threads(pool);
        torch::Tensor a = torch::rand({int64_t{1} << 22});
        while (!stop) a.mul_(0.999).add_(1e-3);  // parallel elementwise work, as a CPU-side step has
      });
    }
    const int64_t before = threads_in_process();
    int64_t most = before;
    const auto start = std::chrono::steady_clock::now();
    int64_t n = 0;
    {
      frugal::DataLoader loader(data, frugal::DataLoaderOptions().batch_size(32).num_workers(2).prefetch_batches(4).worker_threads(
                                          setting.worker_threads));
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        loader.start_epoch(epoch);
        while (auto b = loader.next()) {
          n += b->size();
          most = std::max(most, threads_in_process());
        }
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stop = true;
    if (busy.joinable()) busy.join();
    at::set_num_threads(process_threads);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the workers' OpenMP teams wind down
    return Measured{static_cast<double>(n) / seconds, most - before};
  };
  auto median_rate = [&](const Setting& setting, int intra_op_threads, int rounds) {
    std::vector<double> rates;
    for (int r = 0; r < rounds; ++r) rates.push_back(run(setting, intra_op_threads).samples_per_second);
    return median(rates);
  };
  const auto gpu_pool = static_cast<int>(
      frugal::CpuThreadsPolicy::automatic(true, frugal::DataLoaderOptions().num_workers(2).worker_threads(1), process_threads));
  const Setting before{0, process_threads}, after{1, gpu_pool}, alone{1, 0};
  run(after, process_threads);  // warm the page cache and the decoders
  std::vector<double> before_rates, after_rates;
  for (int r = 0; r < 3; ++r) {  // alternate, medians
    before_rates.push_back(run(before, process_threads).samples_per_second);
    after_rates.push_back(run(after, process_threads).samples_per_second);
  }
  const double rate_before = median(before_rates), rate_after = median(after_rates);
  const double rate_alone = median_rate(alone, process_threads, 3);
  append(results, {"data.loader_busy_main_thread", rate_after, "samples/s", rate_before, command});
  append(results, {"data.loader_busy_vs_alone", rate_after, "samples/s", rate_alone, command});
  std::printf("loader, 2 workers, ResNet decode, training thread busy: %.0f samples/s after (worker_threads 1, training pool %d), "
              "%.0f before (worker_threads 0, pool %d): x%.2f; loader alone %.0f\n",
              rate_after, gpu_pool, rate_before, process_threads, rate_after / rate_before, rate_alone);

  // An H200 host's 16 cores, as the defaults there: 16 intra-op threads.
  const Setting before16{0, 16}, after16{1, 1};
  const double rate_before16 = median_rate(before16, 16, 3), rate_after16 = median_rate(after16, 16, 3);
  append(results, {"data.loader_oversubscribed_16_threads", rate_after16, "samples/s", rate_before16, command});
  const int64_t gained_before = run({0, 0}, 16).threads_gained, gained_after = run({1, 0}, 16).threads_gained;
  append(results, {"data.loader_threads_started", static_cast<double>(gained_after), "threads", static_cast<double>(gained_before), command});
  std::printf("at 16 intra-op threads: %.0f samples/s after, %.0f before (x%.2f); threads started by 2 workers: %lld after, %lld before\n",
              rate_after16, rate_before16, rate_after16 / rate_before16, static_cast<long long>(gained_after),
              static_cast<long long>(gained_before));
}

void collate_reuse(const std::string& results, const std::string& command) {
  std::vector<torch::Tensor> crops;
  for (int64_t i = 0; i < 256; ++i) crops.push_back(torch::randint(0, 256, {224, 224, 3}, torch::kUInt8).permute({2, 0, 1}));
  frugal::detail::BatchBuffers buffers;
  auto fresh = [&] {
    const double start = thread_cpu_seconds();
    for (int r = 0; r < 8; ++r) torch::stack(crops);
    return (thread_cpu_seconds() - start) / 8;
  };
  auto reused = [&] {
    const double start = thread_cpu_seconds();
    for (int r = 0; r < 8; ++r) frugal::detail::stack_into(crops, &buffers, false);
    return (thread_cpu_seconds() - start) / 8;
  };
  const Comparison c = compare_interleaved(7, fresh, reused);
  append(results, {"data.collate_reused_buffer", 256 / c.candidate, "samples/s", 256 / c.baseline, command});
  std::printf("collate of 256 crops 224x224: %.2f ms into a reused buffer, %.2f ms stacked into a fresh tensor (x%.2f)\n",
              1e3 * c.candidate, 1e3 * c.baseline, c.baseline / c.candidate);
}

}  // namespace frugal::bench
