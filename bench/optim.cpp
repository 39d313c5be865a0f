// 8-bit optimizer states on BERT-base (110 M parameters, the BERT example's AdamW groups):
//   optim.state_bytes_8bit  optimizer state bytes with 8-bit over 32-bit states (goal <= 0.26)
//   optim.step_time_8bit    FusedAdamW's step with 8-bit states over its step with fp32 states,
//                           median of interleaved rounds on the same parameters and gradients
//                           (CPU: one LibTorch thread, thread CPU time, as the other CPU benchmarks;
//                           CUDA: wall time between synchronizations)
//
//   frugal_bench_optim RESULTS.jsonl [ROUNDS] [DEVICE]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>

#include "bench_result.hpp"
#include "bert_workload.hpp"
#include "frugal/frugal.hpp"
#include "optim/quantized_param_state.hpp"

namespace {

// Bytes of every tensor the optimizer's states hold (fp32 moments; 8-bit codes and block maxima).
int64_t state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t total = 0;
  for (const auto& [key, state] : optimizer.state()) {
    (void)key;
    if (const auto* q = dynamic_cast<const frugal::QuantizedParamState*>(state.get())) {
      for (const auto& t : q->tensors()) total += static_cast<int64_t>(t.nbytes());
    } else if (const auto* adam = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      total += static_cast<int64_t>(adam->exp_avg().nbytes() + adam->exp_avg_sq().nbytes());
    }
  }
  return total;
}

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: frugal_bench_optim RESULTS.jsonl [ROUNDS] [DEVICE]\n";
    return 2;
  }
  const std::string results = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const torch::Device device(argc > 3 ? argv[3] : "cpu");
  const std::string command = std::string("frugal_bench_optim ") + results + " " + std::to_string(rounds) + " " + device.str();
  torch::manual_seed(0);
  if (!device.is_cuda()) torch::set_num_threads(1);
  torch::NoGradGuard no_grad;
  frugal::BertForQuestionAnswering net(frugal::bench::bert_config(768, 12, 12));
  net->to(device);
  const auto o = torch::optim::AdamWOptions(3e-5).eps(1e-6).weight_decay(0.01);
  auto groups = [&] { return frugal::weight_decay_groups(*net, o, frugal::is_bias_or_layer_norm); };
  frugal::FusedAdamW fp32(groups(), o);
  frugal::FusedAdamW eight(groups(), o, frugal::StateQuantization().bits(8));
  for (auto& p : net->parameters()) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  auto timed_step = [&](torch::optim::Optimizer& opt) {
    if (!device.is_cuda()) {
      const double t0 = thread_seconds();
      opt.step();
      return thread_seconds() - t0;
    }
    torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    opt.step();
    torch::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  timed_step(fp32);  // states made, caches warm
  timed_step(eight);
  const int64_t b32 = state_bytes(fp32), b8 = state_bytes(eight);
  std::cout << "optimizer state of BERT-base: fp32 " << b32 / 1e6 << " MB, 8-bit " << b8 / 1e6 << " MB: " << double(b8) / double(b32) << "x"
            << std::endl;
  if (!device.is_cuda()) frugal::bench::append(results, {"optim.state_bytes_8bit", b8 / 1e6, "MB", b32 / 1e6, command});
  std::vector<double> t32, t8;
  for (int r = 0; r < rounds; ++r) {  // interleaved, alternating which goes first
    if (r % 2 == 0) {
      t32.push_back(timed_step(fp32));
      t8.push_back(timed_step(eight));
    } else {
      t8.push_back(timed_step(eight));
      t32.push_back(timed_step(fp32));
    }
  }
  std::sort(t32.begin(), t32.end());
  std::sort(t8.begin(), t8.end());
  const double m32 = t32[t32.size() / 2], m8 = t8[t8.size() / 2];
  std::cout << "FusedAdamW step on BERT-base (" << device << "): fp32 states " << m32 * 1e3 << " ms, 8-bit states " << m8 * 1e3
            << " ms: " << m8 / m32 << "x" << std::endl;
  frugal::bench::append(results, {"optim.step_time_8bit" + std::string(device.is_cuda() ? "_gpu" : ""), m8 * 1e3, "ms", m32 * 1e3, command});
  return 0;
}
