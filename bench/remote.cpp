// Checkpoints in object storage, against the S3 server bench/remote.sh starts on loopback:
//   upload     remote.upload_throughput: bytes/s of a checkpoint's upload and commit over curl
//              uploading the same files, one after another, to the same server (the baseline).
//   step-time  remote.step_time_while_uploading: the training thread's CPU seconds per step with
//              checkpoint.remote over the same run with local checkpoints only, interleaved (wall
//              time printed: here the server runs on the same 2 cores).
//
//   build/bench/frugal_bench_remote upload|step-time RESULTS BUCKET WORK_DIR [ROUNDS]
// The endpoint and credentials come from the AWS_* variables, as in a real run.

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "bench_result.hpp"
#include "frugal/frugal.hpp"
#include "frugal/remote/remote_checkpoints.hpp"
#include "interleaved.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Net {
  torch::nn::Sequential net;
  std::shared_ptr<frugal::TensorDataset> data;
};

Net make_net(int64_t width, int64_t batch) {
  torch::manual_seed(0);
  return {torch::nn::Sequential(torch::nn::Linear(width, width), torch::nn::ReLU(), torch::nn::Linear(width, width)),
          std::make_shared<frugal::TensorDataset>(torch::randn({batch * 8, width}), torch::randn({batch * 8, width}))};
}

std::unique_ptr<frugal::Trainer> make_trainer(Net& n, const std::string& run_dir, int64_t steps, int64_t batch) {
  frugal::Model model(n.net.ptr(), frugal::LossFn<torch::nn::SequentialImpl>([](torch::nn::SequentialImpl& m, const frugal::Batch& b) {
    return torch::mse_loss(m.forward(b.input), b.target);
  }));
  return std::make_unique<frugal::Trainer>(model, [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.001).momentum(0.9));
  }, n.data, frugal::TrainerOptions().device("cpu").run_dir(run_dir).max_steps(steps).max_epochs(1000).log_every_n_steps(1000000),
     frugal::DataLoaderOptions().batch_size(batch).shuffle(false));
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int upload(const std::string& out, const std::string& bucket, const fs::path& work, int rounds) {
  // A 134 MB model with SGD momentum: 268 MB of checkpoint, as bench/checkpoint_io.cpp writes.
  Net n = make_net(4096, 16);
  auto trainer = make_trainer(n, "", 1, 16);
  trainer->fit();
  frugal::CheckpointStore store(work / "local");
  const frugal::CheckpointInfo info = store.write(trainer->snapshot(), {});
  std::vector<std::string> files;
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(info.dir)) {
    if (e.path().filename() != "manifest.json") files.push_back(e.path().filename().string());
    bytes += e.file_size();
  }
  const std::string endpoint = env("AWS_ENDPOINT_URL");
  auto ours = [&, round = 0]() mutable {
    frugal::RemoteCheckpoints remote({bucket, "bench/ours-" + std::to_string(round++)}, {});
    const auto start = Clock::now();
    remote.upload_files(info.dir, files);
    remote.commit(info.dir);
    return seconds_since(start);
  };
  auto with_curl = [&, round = 0]() mutable {
    // What a user would script: one signed curl upload per file (the keys come from the
    // environment through the shell, never through this program's text).
    std::string script;
    const std::string base = endpoint + "/" + bucket + "/bench/curl-" + std::to_string(round++) + "/" + info.dir.filename().string();
    for (const auto& f : files) {
      script += "curl -sS --fail -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user \"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\" "
                "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T '" + (info.dir / f).string() + "' '" + base + "/" + f + "' && ";
    }
    script += "curl -sS --fail -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user \"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\" "
              "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T '" + (info.dir / "manifest.json").string() + "' '" + base + "/manifest.json'";
    const auto start = Clock::now();
    if (std::system(script.c_str()) != 0) throw std::runtime_error("the curl baseline failed");
    return seconds_since(start);
  };
  const auto c = frugal::bench::compare_interleaved(rounds, with_curl, ours);
  const double mb = 1e6;
  frugal::bench::append(out, {"remote.upload_throughput", static_cast<double>(bytes) / c.candidate / mb, "MB/s",
                              static_cast<double>(bytes) / c.baseline / mb, "bash bench/remote.sh (frugal_bench_remote upload)"});
  std::cout << "upload of " << bytes / 1000000 << " MB: frugal " << c.candidate << " s, curl " << c.baseline << " s\n";
  return 0;
}

int step_time(const std::string& out, const std::string& bucket, const fs::path& work, int rounds) {
  // 2048-wide layers: 67 MB of checkpoint every 10 steps of ~tens of ms each, so that an upload
  // is always running while the training thread works.
  frugal::log::set_level(frugal::log::Level::warn);
  torch::set_num_threads(1);
  const int64_t steps = 60, batch = 64;
  std::vector<double> wall_local, wall_remote;
  auto run = [&](bool remote, int round) {
    Net n = make_net(2048, batch);
    const fs::path run_dir = work / ((remote ? "remote-" : "local-") + std::to_string(round));
    fs::remove_all(run_dir);
    auto trainer = make_trainer(n, run_dir.string(), steps, batch);
    auto options = frugal::CheckpointOptions().every_n_steps(10).keep_last(2).resume(false);
    options.remote().deadline_seconds(300);
    if (remote) options.remote().url("s3://" + bucket + "/bench/steps-" + std::to_string(round));
    frugal::add_checkpointing(*trainer, std::make_shared<frugal::CheckpointPolicy>(options));
    // The training loop alone (the final wait for the last commit is not a step), in the training
    // thread's CPU time as the other benchmarks: on this 2-core machine the S3 server itself runs
    // beside the training thread, which a real store does not; wall time is printed too.
    struct StepClock : frugal::Policy {
      double cpu_start = 0, wall_start = 0, cpu = 0, wall = 0;
      int64_t steps = 0;
      std::string name() const override { return "step_clock"; }
      void on_step_end(frugal::StepContext& ctx) override {
        if (!ctx.boundary() || ctx.state().step != steps) return;
        cpu = frugal::bench::thread_cpu_seconds() - cpu_start;
        wall = std::chrono::duration<double>(Clock::now().time_since_epoch()).count() - wall_start;
      }
    };
    auto clock = std::make_shared<StepClock>();
    clock->steps = steps;
    trainer->add_policy(clock);
    clock->cpu_start = frugal::bench::thread_cpu_seconds();
    clock->wall_start = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    trainer->fit();
    (remote ? wall_remote : wall_local).push_back(clock->wall / static_cast<double>(steps));
    return clock->cpu / static_cast<double>(steps);
  };
  int round_local = 0, round_remote = 0;
  const auto c = frugal::bench::compare_interleaved(rounds, [&] { return run(false, round_local++); }, [&] { return run(true, round_remote++); });
  frugal::bench::append(out, {"remote.step_time_while_uploading", c.candidate * 1e3, "ms/step", c.baseline * 1e3,
                              "bash bench/remote.sh (frugal_bench_remote step-time)"});
  std::cout << "training-thread CPU per step: with remote uploads " << c.candidate * 1e3 << " ms, local only " << c.baseline * 1e3
            << " ms (median ratio " << c.ratio << "); wall per step " << frugal::bench::median(wall_remote) * 1e3 << " ms against "
            << frugal::bench::median(wall_local) * 1e3 << " ms (the server shares the 2 cores)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: frugal_bench_remote upload|step-time RESULTS BUCKET WORK_DIR [ROUNDS]\n";
    return 2;
  }
  const std::string mode = argv[1], out = argv[2], bucket = argv[3];
  const fs::path work = argv[4];
  const int rounds = argc > 5 ? std::stoi(argv[5]) : 3;
  fs::create_directories(work);
  try {
    if (mode == "upload") return upload(out, bucket, work, rounds);
    if (mode == "step-time") return step_time(out, bucket, work, rounds);
  } catch (const std::exception& e) {
    std::cerr << "frugal_bench_remote: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}
