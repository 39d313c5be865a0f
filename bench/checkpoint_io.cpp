// Checkpoint I/O: write throughput against raw write+fsync of the same number of bytes to the
// same directory; staging's share of a whole save (the training thread's part of a snapshot);
// what an async save costs a fit, in steps; fp16 weight storage against fp32 (size and time). A 134 MB model with SGD momentum
// (268 MB of state).
//
//   build/bench/frugal_bench_checkpoint [results.jsonl] [dir] [rounds]

#include <fcntl.h>
#include <unistd.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "bench_result.hpp"
#include "frugal/frugal.hpp"
#include "interleaved.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The baseline: one file of `bytes` written and fsynced, as fast as the disk takes it.
double raw_write(const fs::path& path, size_t bytes) {
  std::string buffer(bytes, 'x');
  const auto start = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, buffer.data() + done, bytes - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  const double s = seconds_since(start);
  fs::remove(path);
  return s;
}

size_t directory_bytes(const fs::path& dir) {
  size_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

// The checkpoint policy, timing the training thread's part of each save (the previous write's
// end, staging) in its step-end hook.
class TimedCheckpointPolicy : public frugal::CheckpointPolicy {
 public:
  using frugal::CheckpointPolicy::CheckpointPolicy;
  void on_step_end(frugal::StepContext& ctx) override {
    const auto start = Clock::now();
    frugal::CheckpointPolicy::on_step_end(ctx);
    held_seconds += seconds_since(start);
  }
  double held_seconds = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : "build/bench/results.jsonl";
  const fs::path dir = argc > 2 ? argv[2] : "build/bench/checkpoint_io";
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 3;
  frugal::log::set_level(frugal::log::Level::warn);
  fs::remove_all(dir);
  fs::create_directories(dir);

  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(4096, 4096), torch::nn::ReLU(), torch::nn::Linear(4096, 4096));
  auto data = std::make_shared<frugal::TensorDataset>(torch::randn({16, 4096}), torch::randn({16, 4096}));
  frugal::Model model(net.ptr(), frugal::LossFn<torch::nn::SequentialImpl>([](torch::nn::SequentialImpl& m, const frugal::Batch& b) {
    return torch::mse_loss(m.forward(b.input), b.target);
  }));
  frugal::Trainer trainer(model, [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  }, data, frugal::TrainerOptions().device("cpu").run_dir("").max_steps(1), frugal::DataLoaderOptions().batch_size(16));
  trainer.fit();  // one step: the momentum buffers exist

  const std::string command = "bench/run (build/bench/frugal_bench_checkpoint)";
  std::vector<double> ckpt_rate, raw_rate, ratio, staging_s, snapshot_s, write_s;
  size_t bytes = 0;
  // The disk's speed wanders (page cache writeback, a shared host): each round writes the
  // checkpoint and the raw file back to back, alternating which goes first, after a sync that
  // leaves nothing of the previous round to write back; the ratio is taken per round.
  for (int r = 0; r < std::max(rounds, 5); ++r) {
    const fs::path store_dir = dir / ("fp32_" + std::to_string(r));
    frugal::CheckpointStore store(store_dir);
    // Staging (the training thread's part), then the copy the writer thread makes.
    auto start = Clock::now();
    auto staged = trainer.staged_snapshot();
    staging_s.push_back(seconds_since(start));
    start = Clock::now();
    const auto snapshot = *staged->finish();
    snapshot_s.push_back(seconds_since(start));
    double ckpt = 0, raw = 0;
    for (int k = 0; k < 2; ++k) {
      ::sync();
      if ((k == 0) == (r % 2 == 0)) {
        start = Clock::now();
        auto info = store.write(snapshot, {});
        ckpt = seconds_since(start);
        bytes = directory_bytes(info.dir);
      } else {
        raw = raw_write(dir / "raw.bin", bytes);  // round 0 writes the checkpoint first: its size is known
      }
    }
    write_s.push_back(ckpt);
    ckpt_rate.push_back(static_cast<double>(bytes) / ckpt);
    raw_rate.push_back(static_cast<double>(bytes) / raw);
    ratio.push_back(raw / ckpt);
    fs::remove_all(store_dir);
  }
  const double mb = 1e6;
  frugal::bench::append(out, {"checkpoint_write_throughput", frugal::bench::median(ckpt_rate) / mb, "MB/s",
                              frugal::bench::median(raw_rate) / mb, command});
  frugal::bench::append(out, {"checkpoint.write_vs_raw", frugal::bench::median(ratio), "ratio", 1.0, command});
  const double staging = frugal::bench::median(staging_s), copy = frugal::bench::median(snapshot_s);
  frugal::bench::append(out, {"checkpoint.staging_share", staging / (staging + copy + frugal::bench::median(write_s)),
                              "fraction of save", 1.0, command});
  // What an async save costs the training, in steps, from fits of the same steps with async
  // checkpoints every kSaveEvery steps and without, interleaved: the training thread's own stall
  // (the checkpoint hook's time, staging and waiting for an earlier write, plus the steps' waits
  // for the staged copies), and the whole fit's extra time, which also counts the writer
  // thread's competition for the machine. Training runs on one thread so that the writer has the
  // other core, as on a GPU machine (where the training thread mostly queues kernels).
  constexpr int64_t kSaveEvery = 6, kSaves = 3, kSteps = kSaves * kSaveEvery + 4;  // the last write ends before the fit
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  struct FitTimes {
    double wall = 0, stall = 0;
  };
  auto fit_times = [&](bool checkpointing, int round) {
    frugal::Trainer t(model, [](torch::nn::Module& m) {
      return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    }, data, frugal::TrainerOptions().device("cpu").run_dir("").max_epochs(1000).max_steps(kSteps), frugal::DataLoaderOptions().batch_size(16));
    const fs::path store_dir = dir / ("stall_" + std::to_string(round));
    std::shared_ptr<TimedCheckpointPolicy> policy;
    if (checkpointing) {
      policy = std::make_shared<TimedCheckpointPolicy>(
          frugal::CheckpointOptions().dir(store_dir.string()).every_n_steps(kSaveEvery).at_end(false).resume(false).keep_last(0));
      frugal::add_checkpointing(t, policy);
    }
    ::sync();
    const auto start = Clock::now();
    const auto result = t.fit();
    FitTimes times{seconds_since(start), result.staged_copy_wait_seconds + (policy ? policy->held_seconds : 0.0)};
    if (result.state.step != kSteps) throw std::runtime_error("the stall bench's fit stopped early");
    fs::remove_all(store_dir);
    return times;
  };
  std::vector<double> stall_steps, cost_steps, step_s;
  fit_times(false, -1);  // warm-up
  for (int r = 0; r < std::max(rounds, 5); ++r) {
    FitTimes with, without;
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == (r % 2 == 0)) {
        with = fit_times(true, r);
      } else {
        without = fit_times(false, r);
      }
    }
    const double step = without.wall / static_cast<double>(kSteps);
    step_s.push_back(step);
    stall_steps.push_back(with.stall / static_cast<double>(kSaves) / step);
    cost_steps.push_back((with.wall - without.wall) / static_cast<double>(kSaves) / step);
  }
  torch::set_num_threads(threads);
  const double step = frugal::bench::median(step_s), stall_per_save = frugal::bench::median(stall_steps);
  const double cost_per_save = frugal::bench::median(cost_steps);
  frugal::bench::append(out, {"checkpoint.async_stall", stall_per_save * step, "s", step, command});
  frugal::bench::append(out, {"checkpoint.async_fit_cost", cost_per_save * step, "s", step, command});

  // fp16 storage: size and time of the whole save, against fp32.
  std::vector<double> half_s, full_s;
  size_t half_bytes = 0, full_bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    for (auto dtype : {frugal::Precision::fp32, frugal::Precision::fp16}) {
      const fs::path store_dir = dir / (frugal::to_string(dtype) + std::to_string(r));
      auto start = Clock::now();
      auto info = frugal::CheckpointStore(store_dir).write(trainer.snapshot(), frugal::CheckpointWriteOptions{dtype, "", {}});
      (dtype == frugal::Precision::fp16 ? half_s : full_s).push_back(seconds_since(start));
      (dtype == frugal::Precision::fp16 ? half_bytes : full_bytes) = directory_bytes(info.dir);
      fs::remove_all(store_dir);
    }
  }
  frugal::bench::append(out, {"fp16_checkpoint_size", static_cast<double>(half_bytes) / mb, "MB",
                              static_cast<double>(full_bytes) / mb, command});
  frugal::bench::append(out, {"fp16_checkpoint_save_time", frugal::bench::median(half_s), "s",
                              frugal::bench::median(full_s), command});
  std::cout << "checkpoint of " << bytes / 1000000 << " MB: staging " << staging << " s, copy " << copy << " s, write " << frugal::bench::median(write_s)
            << " s; write against raw write+fsync x" << frugal::bench::median(ratio) << " (goal >= 0.8); an async save stalls the training thread "
            << stall_per_save << " of a step of " << step << " s (goal <= 0.05) and costs the fit " << cost_per_save << " of a step (per round:";
  for (const double x : cost_steps) std::cout << " " << x;
  std::cout << ")\n";
  fs::remove_all(dir);
  return 0;
}
