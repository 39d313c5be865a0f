// Checkpoint I/O: write throughput against raw write+fsync of the same number of bytes to the
// same directory; the training-thread stall of an async save (the snapshot) as a fraction of the
// whole save; fp16 weight storage against fp32 (size and time). A 134 MB model with SGD momentum
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
  std::vector<double> ckpt_rate, raw_rate, ratio, snapshot_s, write_s;
  size_t bytes = 0;
  // The disk's speed wanders (page cache writeback, a shared host): each round writes the
  // checkpoint and the raw file back to back, alternating which goes first, after a sync that
  // leaves nothing of the previous round to write back; the ratio is taken per round.
  for (int r = 0; r < std::max(rounds, 5); ++r) {
    const fs::path store_dir = dir / ("fp32_" + std::to_string(r));
    frugal::CheckpointStore store(store_dir);
    auto start = Clock::now();
    auto snapshot = trainer.snapshot();
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
  const double stall = frugal::bench::median(snapshot_s), save = stall + frugal::bench::median(write_s);
  frugal::bench::append(out, {"async_checkpoint_stall_fraction", stall / save, "fraction of save", 1.0, command});
  // The training thread's stall of an async save (the snapshot) against one step of this model.
  std::vector<double> step_s;
  {
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    const auto x = torch::randn({16, 4096}), y = torch::randn({16, 4096});
    for (int r = 0; r < 6; ++r) {
      const auto t0 = Clock::now();
      sgd.zero_grad();
      torch::mse_loss(net->forward(x), y).backward();
      sgd.step();
      if (r > 0) step_s.push_back(seconds_since(t0));  // the first warms the allocator up
    }
  }
  frugal::bench::append(out, {"checkpoint.async_stall", stall, "s", frugal::bench::median(step_s), command});

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
  std::cout << "checkpoint of " << bytes / 1000000 << " MB: snapshot " << stall << " s, write " << frugal::bench::median(write_s)
            << " s; write against raw write+fsync x" << frugal::bench::median(ratio) << " (goal >= 0.8); stall against a step of "
            << frugal::bench::median(step_s) << " s: x" << stall / frugal::bench::median(step_s) << "\n";
  fs::remove_all(dir);
  return 0;
}
