// Memory benchmarks (issue 22); each ratio is Frugal with the feature over Frugal without it, in
// one run.
// - activation: a BERT training step (default BERT-base: hidden 768, 12 layers, sequence 384,
//   batch 4, fp32, FusedAdamW), activation checkpointing full / every:2 / attention against off.
//     memory.activation_checkpointing_peak[.every2|.attention]  activation memory: what the step
//         allocates above what was held before its forward (weights, gradients, optimizer state),
//         counted through LibTorch's allocation reports
//     memory.activation_checkpointing_time[.every2|.attention]  the step's time (thread CPU time
//         on one thread, alternating rounds, medians; the CPU memory cache on, as in the Trainer)
//   and the anchor, measured alike in fresh processes by peak RSS above the RSS before the step
//   (glibc's mmap threshold at 64 KiB, so freed blocks leave): Frugal full vs off
//   (memory.activation_checkpointing_peak_rss), and Hugging Face transformers with
//   gradient_checkpointing_enable(use_reentrant=False) vs without (..._rss.transformers, and
//   memory.activation_checkpointing_time.transformers).
// - sharded (launched by torchrun, 2 gloo ranks): a BERT-base-sized model trained with
//   distributed.shard = optimizer / gradients against off: per-rank optimizer state + gradient
//   bytes (memory.sharded_state_bytes_2ranks[.optimizer]) and step time
//   (memory.sharded_step_time_2ranks[.optimizer]).
//
//   build/bench/frugal_bench_memory activation build/bench/results.jsonl PYTHON [HIDDEN LAYERS HEADS SEQ BATCH ROUNDS]
//   torchrun --nproc-per-node=2 --no-python build/bench/frugal_bench_memory sharded build/bench/results.jsonl [HIDDEN LAYERS SEQ BATCH STEPS]
//   build/bench/frugal_bench_memory gpu build/bench/results.jsonl [STEPS]   (the GPU check: largest BERT-large batch)

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "bench_result.hpp"
#include "bert_workload.hpp"
#include "frugal/frugal.hpp"
#include "support/source_dir.hpp"
#include "interleaved.hpp"
#include "tooling/detail/cpu_memory_meter.hpp"

using frugal::bench::Result;

namespace {

struct Shape {
  int64_t hidden = 768, layers = 12, heads = 12, seq = 384, batch = 4;
  frugal::BertConfig config() const { return frugal::bench::bert_config(hidden, layers, heads); }
  std::string args() const { return c10::str(hidden, " ", layers, " ", heads, " ", seq, " ", batch); }
};

// BERT training steps on fixed-length random tokens (fp32, or bf16 autocast), after a warm-up step
// that made the gradients (kept, zeroed: set_to_none=false) and the optimizer's state.
class BertStep {
 public:
  BertStep(const frugal::BertConfig& config, const std::string& plan, int64_t batch, int64_t seq,
           torch::Device device = torch::kCPU, bool bf16 = false)
      : net_(seeded(config)), device_(device), bf16_(bf16) {
    net_->bert->encoder->set_activation_checkpointing(frugal::ActivationCheckpointing::parse(plan));
    net_->to(device);
    optimizer_ = frugal::bench::qa_adamw(*net_);
    net_->train();
    resize(batch, seq);
    run();
  }
  /// The next steps' batch.
  void resize(int64_t batch, int64_t seq) {
    ids_ = torch::randint(1, net_->config().vocab_size, {batch, seq}).to(device_);
    mask_ = torch::ones_like(ids_);
    starts_ = torch::randint(0, seq, {batch}).to(device_);
    ends_ = torch::randint(0, seq, {batch}).to(device_);
  }
  void run() {
    optimizer_->zero_grad(/*set_to_none=*/false);
    torch::Tensor loss;
    {
      std::optional<frugal::AutocastGuard> autocast;
      if (bf16_) autocast.emplace(device_.type(), torch::kBFloat16);
      auto [start, end] = net_->forward(ids_, torch::zeros_like(ids_), mask_);
      loss = frugal::question_answering_loss(start, end, starts_, ends_);
    }
    loss.backward();
    optimizer_->step();
  }

 private:
  static frugal::BertForQuestionAnswering seeded(const frugal::BertConfig& config) {
    torch::manual_seed(0);
    return frugal::BertForQuestionAnswering(config);
  }
  frugal::BertForQuestionAnswering net_;
  torch::Device device_;
  bool bf16_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  torch::Tensor ids_, mask_, starts_, ends_;
};

int64_t status_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(std::string(field) + ":", 0) == 0) return std::stoll(line.substr(line.find(':') + 1)) * 1024;
  }
  throw std::runtime_error(std::string(field) + " not in /proc/self/status");
}

nlohmann::json run_json(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string out(1 << 16, '\0');
  out.resize(fread(out.data(), 1, out.size(), pipe));
  if (pclose(pipe) != 0) throw std::runtime_error("failed: " + command + "\n" + out);
  return nlohmann::json::parse(out.substr(out.rfind('{')));
}

// In a fresh process (this program, mode rss): the step's peak RSS above the RSS before it.
int rss(const std::string& plan, const Shape& s) {
  torch::set_num_threads(1);
  BertStep step(s.config(), plan, s.batch, s.seq);
  std::ofstream("/proc/self/clear_refs") << "5";  // resets the peak RSS (VmHWM) to the current RSS
  const int64_t before = status_bytes("VmRSS");
  step.run();
  std::printf("{\"activation_bytes\": %lld}\n", static_cast<long long>(status_bytes("VmHWM") - before));
  return 0;
}

int activation(const std::string& results, const std::string& python, const std::string& self, const Shape& s, int rounds) {
  torch::set_num_threads(1);
  frugal::enable_cpu_memory_cache();  // as the Trainer runs (trainer.cpu_memory_cache): steps do not pay page faults
  const std::string command = c10::str("build/bench/frugal_bench_memory activation build/bench/results.jsonl ", python, " ", s.args(), " ", rounds);
  const std::string what = c10::str("BERT hidden ", s.hidden, " layers ", s.layers, " seq ", s.seq, " batch ", s.batch, " fp32 CPU");
  auto activation_bytes = [&](const std::string& plan) {
    BertStep step(s.config(), plan, s.batch, s.seq);
    frugal::detail::CpuMemoryMeter meter;  // counts what the step allocates: weights, gradients and state came before
    step.run();
    return static_cast<double>(meter.peak_bytes());
  };
  auto seconds = [&](const std::string& plan) {
    auto step = std::make_shared<BertStep>(s.config(), plan, s.batch, s.seq);
    return [step] {
      const double start = frugal::bench::thread_cpu_seconds();
      step->run();
      return frugal::bench::thread_cpu_seconds() - start;
    };
  };
  constexpr double mb = 1024.0 * 1024.0;
  const double plain = activation_bytes("off");
  const auto plain_time = seconds("off");
  for (const auto& [plan, suffix] : {std::pair<std::string, std::string>{"full", ""}, {"every:2", ".every2"}, {"attention", ".attention"}}) {
    const double bytes = activation_bytes(plan);
    const Result peak{"memory.activation_checkpointing_peak" + suffix, bytes / mb, "MB", plain / mb, command};
    frugal::bench::append(results, peak);
    const frugal::bench::Comparison t = frugal::bench::compare_interleaved(rounds, plain_time, seconds(plan));
    const Result time{"memory.activation_checkpointing_time" + suffix, t.candidate, "s/step", t.baseline, command};
    frugal::bench::append(results, time);
    std::printf("%s, %s: activation memory %.0f MB vs %.0f (x%.3f), step %.2f s vs %.2f (x%.3f, median of rounds %.3f)\n",
                what.c_str(), plan.c_str(), bytes / mb, plain / mb, bytes / plain, t.candidate, t.baseline, t.candidate / t.baseline, t.ratio);
  }
  // The anchor: the same step by peak RSS in fresh processes, Frugal and transformers alike.
  setenv("MALLOC_MMAP_THRESHOLD_", "65536", 1);
  auto frugal_rss = [&](const std::string& plan) {
    return run_json(c10::str(self, " rss ", plan, " ", s.args()))["activation_bytes"].get<double>();
  };
  const double ours_full = frugal_rss("full"), ours_off = frugal_rss("off");
  frugal::bench::append(results, {"memory.activation_checkpointing_peak_rss", ours_full / mb, "MB", ours_off / mb, command});
  auto hf = [&](int checkpointing) {
    return run_json(c10::str(python, " ", frugal::testing::source_dir(), "/bench/bert_checkpointing.py ", s.args(), " 2 1 ", checkpointing));
  };
  const nlohmann::json hf_full = hf(1), hf_off = hf(0);
  frugal::bench::append(results, {"memory.activation_checkpointing_peak_rss.transformers", hf_full["activation_bytes"].get<double>() / mb, "MB",
                                  hf_off["activation_bytes"].get<double>() / mb, command});
  frugal::bench::append(results, {"memory.activation_checkpointing_time.transformers", hf_full["seconds"].get<double>(), "s/step",
                                  hf_off["seconds"].get<double>(), command});
  std::printf("peak RSS above the step's start: Frugal full %.0f MB vs off %.0f (x%.3f); transformers checkpointed %.0f MB vs %.0f (x%.3f), "
              "step x%.3f\n",
              ours_full / mb, ours_off / mb, ours_full / ours_off, hf_full["activation_bytes"].get<double>() / mb,
              hf_off["activation_bytes"].get<double>() / mb, hf_full["activation_bytes"].get<double>() / hf_off["activation_bytes"].get<double>(),
              hf_full["seconds"].get<double>() / hf_off["seconds"].get<double>());
  return 0;
}

// Seconds of each optimizer step after the first.
struct StepClock : frugal::Policy {
  std::string name() const override { return "step_clock"; }
  void on_step_end(frugal::StepContext& ctx) override {
    if (!ctx.boundary()) return;
    const auto now = std::chrono::steady_clock::now();
    if (ctx.state().step > 1) seconds.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  }
  std::chrono::steady_clock::time_point last;
  std::vector<double> seconds;
};

int sharded(const std::string& results, const Shape& s, int64_t steps) {
  torch::set_num_threads(1);
  const frugal::World world = frugal::detect_world(frugal::process_environment());
  auto comm = frugal::connect(world, frugal::CommunicatorOptions().backend(frugal::CollectiveBackend::gloo));
  struct Figures {
    double bytes = 0, seconds = 0;
  };
  auto train = [&](frugal::ShardMode mode) {
    torch::manual_seed(0);
    frugal::BertForQuestionAnswering net(s.config());
    frugal::Trainer trainer(
        frugal::bench::qa_model(net), frugal::bench::qa_adamw,
        std::make_shared<frugal::bench::RandomTokens>(s.config().vocab_size, s.seq, std::vector<int64_t>(64, s.seq)),
        frugal::TrainerOptions().device("cpu").max_steps(steps).max_epochs(steps).run_dir("").log_every_n_steps(1),
        frugal::DataLoaderOptions().batch_size(s.batch).shuffle(false));
    frugal::add_data_parallel(trainer, std::make_shared<frugal::DataParallelPolicy>(comm, frugal::DataParallelOptions().shard(mode)));
    auto memory = std::make_shared<frugal::MemoryReportPolicy>();
    auto clock = std::make_shared<StepClock>();
    trainer.add_policy(memory);
    trainer.add_policy(clock);
    trainer.fit();
    const auto& f = memory->footprint();
    return Figures{static_cast<double>(f.optimizer_state_bytes + f.gradient_bytes), frugal::bench::median(clock->seconds)};
  };
  const Figures off = train(frugal::ShardMode::off);
  const std::string command = c10::str("torchrun --standalone --nproc-per-node=2 --no-python build/bench/frugal_bench_memory sharded "
                                       "build/bench/results.jsonl ", s.hidden, " ", s.layers, " ", s.seq, " ", s.batch, " ", steps);
  constexpr double mb = 1024.0 * 1024.0;
  for (const auto& [mode, suffix] : {std::pair{frugal::ShardMode::gradients, ""}, std::pair{frugal::ShardMode::optimizer, ".optimizer"}}) {
    const Figures f = train(mode);
    if (world.rank != 0) continue;
    frugal::bench::append(results, {c10::str("memory.sharded_state_bytes_2ranks", suffix), f.bytes / mb, "MB", off.bytes / mb, command});
    frugal::bench::append(results, {c10::str("memory.sharded_step_time_2ranks", suffix), f.seconds, "s/step", off.seconds, command});
    std::printf("shard=%s on %lld gloo ranks, BERT hidden %lld layers %lld: optimizer state + gradients %.0f MB vs %.0f unsharded (x%.3f), "
                "step %.2f s vs %.2f (x%.3f)\n",
                frugal::to_string(mode).c_str(), static_cast<long long>(world.world_size), static_cast<long long>(s.hidden),
                static_cast<long long>(s.layers), f.bytes / mb, off.bytes / mb, f.bytes / off.bytes, f.seconds, off.seconds,
                f.seconds / off.seconds);
  }
  return 0;
}

}  // namespace

// On a GPU: the largest BERT-large micro-batch at 384 that fits (bf16, real steps through the
// automatic batch size's search), with activation checkpointing off and full, and seq/s at each.
int gpu(const std::string& results, int64_t steps) {
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  const frugal::BertConfig large = frugal::BertConfig::preset("large");
  const torch::Device cuda(torch::kCUDA);
  const std::string command = c10::str("build/bench/frugal_bench_memory gpu build/bench/results.jsonl ", steps);
  std::map<std::string, std::pair<int64_t, double>> found;  // plan -> (largest micro-batch, seq/s)
  for (const std::string plan : {"off", "full"}) {
    auto step = std::make_unique<BertStep>(large, plan, 8, 384, cuda, true);
    const frugal::BatchSizeSearch search = frugal::find_batch_size(
        [&](int64_t n) {
          step->resize(n, 384);
          step->run();
        },
        cuda, // Steps of 64 up to 4096: each trial near the top is seconds of work, and the check has minutes.
        frugal::BatchSizeFinderOptions().start(8).multiple_of(64).max(4096).margin(0.1));
    step->resize(search.batch_size, 384);
    step->run();
    torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < steps; ++i) step->run();
    torch::cuda::synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    found[plan] = {search.batch_size, static_cast<double>(search.batch_size * steps) / seconds};
    std::printf("bert-large seq 384 bf16, activation checkpointing %s: largest micro-batch %lld (%.0f MB), %.1f seq/s\n", plan.c_str(),
                static_cast<long long>(search.batch_size), search.capacity_mb, found[plan].second);
  }
  frugal::bench::append(results, {"memory.gpu_bert_large_max_batch", static_cast<double>(found["full"].first), "sequences",
                                  static_cast<double>(found["off"].first), command});
  frugal::bench::append(results, {"memory.gpu_bert_large_seq_per_s", found["full"].second, "seq/s", found["off"].second, command});
  return 0;
}

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  auto arg = [&](size_t i, int64_t fallback) { return a.size() > i ? std::stoll(a[i]) : fallback; };
  try {
    if (a.size() >= 3 && a[0] == "activation") {
      const Shape s{arg(3, 768), arg(4, 12), arg(5, 12), arg(6, 384), arg(7, 4)};
      return activation(a[1], a[2], argv[0], s, static_cast<int>(arg(8, 3)));
    }
    if (a.size() >= 2 && a[0] == "rss") return rss(a[1], Shape{arg(2, 768), arg(3, 12), arg(4, 12), arg(5, 384), arg(6, 4)});
    if (a.size() >= 2 && a[0] == "gpu") return gpu(a[1], arg(2, 10));
    if (a.size() >= 2 && a[0] == "sharded") {
      const Shape s{arg(2, 768), arg(3, 12), 12, arg(4, 128), arg(5, 2)};
      return sharded(a[1], s, arg(6, 6));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_bench_memory: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: frugal_bench_memory activation RESULTS PYTHON [HIDDEN LAYERS HEADS SEQ BATCH ROUNDS]\n"
               "       frugal_bench_memory sharded RESULTS [HIDDEN LAYERS SEQ BATCH STEPS]   (under torchrun)\n"
               "       frugal_bench_memory gpu RESULTS [STEPS]\n");
  return 2;
}
