// 8-bit optimizer states against bitsandbytes itself (its CPU backend), and what they must keep:
// fp32 states for small tensors, untouched states on an fp16 overflow, bitwise checkpoints, and
// conversion to and from fp32 states.
#include <catch2/catch.hpp>

#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "frugal/io/safetensors.hpp"
#include "optim/detail/quantized_steps.hpp"
#include "optim/optimizer_archive.hpp"
#include "optim/quantized_param_state.hpp"
#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

const std::map<std::string, torch::Tensor>& bnb_reference() {
  static const std::map<std::string, torch::Tensor> tensors = [] {
    // A file of this process's own: ctest runs several processes of this binary at once (the
    // parity cases, and the kernel cases again on the AVX2 path), and one must not read another's
    // half-written file.
    const auto path = std::filesystem::current_path() / ("bnb_optimizer_8bit." + std::to_string(::getpid()) + ".safetensors");
    run_python_reference("bnb_optimizer_8bit.py", path.string());
    auto tensors = read_safetensors(path);
    std::filesystem::remove(path);
    return tensors;
  }();
  return tensors;
}

const torch::Tensor& bnb(const std::string& key) {
  const auto& r = bnb_reference();
  const auto it = r.find(key);
  if (it == r.end()) throw std::runtime_error("the bitsandbytes reference has no " + key);
  return it->second;
}

// Codes equal, or one apart where a float rounding of a tie went the other way (two after ten
// steps, where an earlier tie moved a moment by one code).
void check_codes(const torch::Tensor& ours, const torch::Tensor& theirs, const std::string& what, int most = 1) {
  const auto diff = (ours.to(torch::kInt) - theirs.to(torch::kInt)).abs();
  const int64_t off = diff.gt(0).sum().item<int64_t>();
  INFO(what << ": " << off << " of " << ours.numel() << " codes differ, at most by " << diff.max().item<int>());
  CHECK(diff.max().item<int>() <= most);
  CHECK(off * 1000 <= ours.numel());  // ties are rare: at most 0.1%
}

// Each value within 1e-6 relative (block maxima).
void check_close(const torch::Tensor& ours, const torch::Tensor& theirs, const std::string& what) {
  const double worst = ((ours - theirs).abs() / theirs.abs().clamp_min(1e-30)).max().item<double>();
  INFO(what << ": largest relative difference " << worst);
  CHECK(worst <= 1e-6);
}

// The whole tensor within `tolerance` relative (parameters, as the sharding tests compare them).
void check_norm_close(const torch::Tensor& ours, const torch::Tensor& theirs, const std::string& what, double tolerance = 1e-6) {
  const double d = ((ours - theirs).norm() / theirs.norm()).item<double>();
  INFO(what << ": relative difference " << d);
  CHECK(d <= tolerance);
}

struct Case {
  std::string name;
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)> make;
  std::vector<std::string> moments;  // ours, in bitsandbytes' order state1, state2
};

std::vector<Case> cases() {
  const auto eight = StateQuantization().bits(8);
  return {{"adamw",
           [eight](std::vector<torch::Tensor> ps) {
             return std::make_unique<FusedAdamW>(ps, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01), eight);
           },
           {"exp_avg", "exp_avg_sq"}},
          {"adam",
           [eight](std::vector<torch::Tensor> ps) {
             return std::make_unique<FusedAdam>(ps, torch::optim::AdamOptions(2e-3).betas({0.8, 0.99}).eps(1e-6), eight);
           },
           {"exp_avg", "exp_avg_sq"}},
          {"sgd",
           [eight](std::vector<torch::Tensor> ps) {
             return std::make_unique<QuantizedSGD>(ps, torch::optim::SGDOptions(1e-2).momentum(0.9).weight_decay(1e-3), eight);
           },
           {"momentum_buffer"}}};
}

const std::vector<std::string> kSizes{"whole", "partial", "small"};

}  // namespace

TEST_CASE("the dynamic quantization maps are bitsandbytes' bit for bit", "[optim][parity][python]") {
  CHECK(torch::equal(frugal::detail::dynamic_map(true), bnb("map_signed")));
  CHECK(torch::equal(frugal::detail::dynamic_map(false), bnb("map_unsigned")));
}

// Runs each case through the reference's 10 steps; `check(case, step, tensor index, optimizer,
// parameters)` after steps 1 and 10.
template <class Check>
void through_ten_steps(Check check) {
  torch::set_num_threads(2);
  for (const auto& c : cases()) {
    std::vector<torch::Tensor> params;
    for (const auto& size : kSizes) params.push_back(bnb(size + "/param").clone().requires_grad_(true));
    auto optimizer = c.make(params);
    for (int step = 1; step <= 10; ++step) {
      for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = bnb(kSizes[i] + "/grads")[step - 1].clone();
      optimizer->step();
      if (step != 1 && step != 10) continue;
      for (size_t i = 0; i < params.size(); ++i) check(c, step, i, *optimizer, params[i]);
    }
  }
}

// bitsandbytes' optimizers with the published quantizer (the nearest code; see the reference
// script for why its CPU quantizer is not that): codes equal but for ties, parameters to 1e-6.
TEST_CASE("8-bit AdamW, Adam and SGD match bitsandbytes with the nearest-code quantizer through 1 and 10 steps: codes, block maxima, parameters",
          "[optim][parity][python][kernels]") {
  through_ten_steps([](const Case& c, int step, size_t i, torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
    const std::string key = "exact/" + c.name + "/" + std::to_string(step) + "/" + kSizes[i];
    check_norm_close(param.detach(), bnb(key + "/param"), key + " parameter");
    const auto& state = *optimizer.state().at(param.unsafeGetTensorImpl());
    if (kSizes[i] == "small") {  // below min_8bit_size: fp32 states on both sides
      CHECK(dynamic_cast<const QuantizedParamState*>(&state) == nullptr);
      return;
    }
    const auto& q = dynamic_cast<const QuantizedParamState&>(state);
    for (size_t m = 0; m < c.moments.size(); ++m) {
      const std::string n = std::to_string(m + 1);
      check_codes(q.moment(m).codes, bnb(key + "/state" + n), key + " " + c.moments[m] + " codes", step == 1 ? 1 : 2);
      check_close(q.moment(m).absmax, bnb(key + "/absmax" + n), key + " " + c.moments[m] + " block maxima");
    }
  });
}

// bitsandbytes as it is: its CPU quantizer's approximate lookup moves some codes, so only the first
// step's parameters (computed before any quantization) are equal; later ones stay close.
TEST_CASE("8-bit AdamW, Adam and SGD stay close to bitsandbytes' own CPU backend", "[optim][parity][python]") {
  through_ten_steps([](const Case& c, int step, size_t i, torch::optim::Optimizer&, const torch::Tensor& param) {
    const std::string key = "bnb/" + c.name + "/" + std::to_string(step) + "/" + kSizes[i];
    check_norm_close(param.detach(), bnb(key + "/param"), key + " parameter", step == 1 ? 1e-6 : 1e-3);
  });
}

TEST_CASE("tensors below min_elements keep fp32 states, larger ones 8-bit, and 32 bits is plain fused AdamW", "[optim]") {
  Seeded seeded;
  auto big = torch::randn({64, 80}, torch::requires_grad());  // 5120 elements
  auto small = torch::randn({100}, torch::requires_grad());
  for (const int64_t min_elements : {4096, 6000}) {
    FusedAdamW opt(std::vector<torch::Tensor>{big, small}, torch::optim::AdamWOptions(1e-3),
                   StateQuantization().bits(8).min_elements(min_elements));
    big.mutable_grad() = torch::randn_like(big);
    small.mutable_grad() = torch::randn_like(small);
    opt.step();
    const bool big_quantized = dynamic_cast<const QuantizedParamState*>(opt.state().at(big.unsafeGetTensorImpl()).get()) != nullptr;
    CHECK(big_quantized == (min_elements == 4096));
    CHECK(dynamic_cast<const torch::optim::AdamWParamState*>(opt.state().at(small.unsafeGetTensorImpl()).get()) != nullptr);
  }
  // With 32 bits nothing is quantized, and the arithmetic is torch::optim::AdamW's.
  auto a = big.detach().clone().requires_grad_(true), b = big.detach().clone().requires_grad_(true);
  FusedAdamW fused(std::vector<torch::Tensor>{a}, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  torch::optim::AdamW plain(std::vector<torch::Tensor>{b}, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  for (int i = 0; i < 3; ++i) {
    const auto g = torch::randn_like(a);
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    fused.step();
    plain.step();
  }
  CHECK(torch::allclose(a, b, 1e-5, 1e-7));
}

TEST_CASE("FusedAdam and QuantizedSGD with 32-bit states compute what torch::optim::Adam and SGD compute", "[optim]") {
  Seeded seeded;
  const auto start = torch::randn({50, 100});
  auto run = [&](torch::optim::Optimizer& opt, torch::Tensor& p) {
    for (int i = 0; i < 4; ++i) {
      torch::manual_seed(static_cast<uint64_t>(i));
      p.mutable_grad() = torch::randn_like(p);
      opt.step();
    }
  };
  auto a = start.clone().requires_grad_(true), b = start.clone().requires_grad_(true);
  FusedAdam fused(std::vector<torch::Tensor>{a}, torch::optim::AdamOptions(1e-2).weight_decay(0.05));
  torch::optim::Adam adam(std::vector<torch::Tensor>{b}, torch::optim::AdamOptions(1e-2).weight_decay(0.05));
  run(fused, a);
  run(adam, b);
  CHECK(torch::allclose(a, b, 1e-5, 1e-7));
  for (const bool nesterov : {false, true}) {
    auto c = start.clone().requires_grad_(true), d = start.clone().requires_grad_(true);
    const auto o = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3).nesterov(nesterov);
    QuantizedSGD ours(std::vector<torch::Tensor>{c}, o);
    torch::optim::SGD theirs(std::vector<torch::Tensor>{d}, o);
    run(ours, c);
    run(theirs, d);
    CHECK(torch::equal(c, d));
  }
}

TEST_CASE("8-bit SGD with Nesterov and dampening follows torch::optim::SGD's arithmetic to the quantization error", "[optim]") {
  Seeded seeded;
  const auto start = torch::randn({80, 100});
  auto a = start.clone().requires_grad_(true), b = start.clone().requires_grad_(true);
  const auto o = torch::optim::SGDOptions(0.01).momentum(0.9).dampening(0.1).nesterov(false).weight_decay(1e-3);
  QuantizedSGD eight(std::vector<torch::Tensor>{a}, o, StateQuantization().bits(8));
  torch::optim::SGD plain(std::vector<torch::Tensor>{b}, o);
  for (int i = 0; i < 5; ++i) {
    const auto g = torch::randn_like(a);
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    eight.step();
    plain.step();
  }
  // The parameters moved by 5 steps of lr 0.01; the 8-bit momentum is within a few % of fp32's.
  const double moved = (b - start).norm().item<double>(), off = (a - b).norm().item<double>();
  INFO("moved " << moved << ", 8-bit off by " << off);
  CHECK(off < 0.05 * moved);
}

TEST_CASE("8-bit states survive a checkpoint bitwise and convert to fp32 states and back", "[optim][checkpoint]") {
  Seeded seeded;
  const auto start = torch::randn({96, 128});
  std::vector<torch::Tensor> grads;
  for (int i = 0; i < 8; ++i) grads.push_back(torch::randn_like(start) * (1 + i));
  const auto o = torch::optim::AdamWOptions(1e-3).weight_decay(0.01);
  const auto eight = StateQuantization().bits(8);
  auto run = [&](torch::optim::Optimizer& opt, torch::Tensor& p, int from, int to) {
    for (int i = from; i < to; ++i) {
      p.mutable_grad() = grads[static_cast<size_t>(i)].clone();
      opt.step();
    }
  };
  auto whole = start.clone().requires_grad_(true);
  FusedAdamW straight(std::vector<torch::Tensor>{whole}, o, eight);
  run(straight, whole, 0, 8);

  auto first = start.clone().requires_grad_(true);
  FusedAdamW before(std::vector<torch::Tensor>{first}, o, eight);
  run(before, first, 0, 4);
  const std::string bytes = frugal::detail::optimizer_archive_bytes(before);
  auto second = first.detach().clone().requires_grad_(true);
  FusedAdamW after(std::vector<torch::Tensor>{second}, o, eight);
  {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    after.load(archive);
  }
  CHECK(frugal::detail::optimizer_archive_bytes(after) == bytes);
  run(after, second, 4, 8);
  CHECK(torch::equal(second, whole));

  // 8-bit -> fp32: the dequantized values exactly; fp32 -> 8-bit: the codes again, but for the
  // blocks whose maximum is a negative first moment (the signed map ends at -0.993, not -1).
  FusedAdamW as_fp32(std::vector<torch::Tensor>{first.detach().clone().requires_grad_(true)}, o);
  {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    as_fp32.load(archive);
  }
  const auto& fp32 = dynamic_cast<const torch::optim::AdamWParamState&>(*as_fp32.state().begin()->second);
  const auto& q = dynamic_cast<const QuantizedParamState&>(*before.state().begin()->second);
  CHECK(torch::equal(fp32.exp_avg().reshape({-1}), frugal::detail::dequantize_blockwise(q.moment(0), true)));
  CHECK(torch::equal(fp32.exp_avg_sq().reshape({-1}), frugal::detail::dequantize_blockwise(q.moment(1), false)));
  CHECK(fp32.step() == 4);
  const std::string fp32_bytes = frugal::detail::optimizer_archive_bytes(as_fp32);
  FusedAdamW back(std::vector<torch::Tensor>{first.detach().clone().requires_grad_(true)}, o, eight);
  {
    std::istringstream in(fp32_bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    back.load(archive);
  }
  const auto& again = dynamic_cast<const QuantizedParamState&>(*back.state().begin()->second);
  CHECK(torch::equal(again.moment(1).codes, q.moment(1).codes));  // the second moment's maximum is a code (1.0)
  const auto m0 = frugal::detail::dequantize_blockwise(q.moment(0), true), m1 = frugal::detail::dequantize_blockwise(again.moment(0), true);
  const double error = ((m1 - m0).abs().max() / m0.abs().max()).item<double>();
  INFO("first moment after 8 -> 32 -> 8 bits: largest error " << error << " of the largest value");
  CHECK(error <= 0.02);
}

TEST_CASE("bad state_bits and state_min_elements are refused naming the option", "[optim]") {
  auto p = torch::randn({10}, torch::requires_grad());
  auto make = [&](StateQuantization q) { FusedAdamW opt(std::vector<torch::Tensor>{p}, torch::optim::AdamWOptions(1e-3), q); };
  CHECK_THROWS_WITH(make(StateQuantization().bits(4)), Catch::Contains("state_bits must be 32 or 8, got 4"));
  CHECK_THROWS_WITH(make(StateQuantization().bits(8).min_elements(-1)), Catch::Contains("state_min_elements must be >= 0"));
  CHECK_THROWS_WITH(FusedAdamW(std::vector<torch::Tensor>{p}, torch::optim::AdamWOptions(1e-3).amsgrad(true), StateQuantization().bits(8)),
                    Catch::Contains("amsgrad"));
}

TEST_CASE("the CUDA kernels compute what the CPU kernels compute", "[optim][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (the 8-bit CUDA kernels)\n";
    return;
  }
  Seeded seeded;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const auto start = torch::randn({5000}).to(dtype);
    std::vector<torch::Tensor> grads;
    for (int i = 0; i < 10; ++i) grads.push_back((torch::randn({5000}) * torch::randn({5000}).exp()).to(dtype));
    auto run = [&](const torch::Device& device) {
      auto p = start.to(device).requires_grad_(true);
      FusedAdamW opt(std::vector<torch::Tensor>{p}, torch::optim::AdamWOptions(1e-3).weight_decay(0.01), StateQuantization().bits(8));
      for (const auto& g : grads) {
        p.mutable_grad() = g.to(device);
        opt.step();
      }
      const auto& q = dynamic_cast<const QuantizedParamState&>(*opt.state().begin()->second);
      return std::make_tuple(p.detach().cpu(), q.moment(0).codes.cpu(), q.moment(1).codes.cpu(), q.moment(0).absmax.cpu());
    };
    const auto [cpu_p, cpu_m, cpu_v, cpu_max] = run(torch::kCPU);
    const auto [gpu_p, gpu_m, gpu_v, gpu_max] = run(torch::Device(torch::kCUDA));
    INFO("dtype " << dtype);
    check_codes(gpu_m, cpu_m, "first moment");
    check_codes(gpu_v, cpu_v, "second moment");
    check_close(gpu_max, cpu_max, "block maxima");
    const double tolerance = dtype == torch::kFloat32 ? 1e-6 : 1e-2;
    CHECK(((gpu_p.to(torch::kFloat) - cpu_p.to(torch::kFloat)).abs() / cpu_p.to(torch::kFloat).abs().clamp_min(1e-6)).max().item<double>() <=
          tolerance);
  }
  // Quantize and dequantize alone, and 8-bit SGD momentum.
  const auto values = torch::randn({3000}) * torch::randn({3000}).exp();
  const auto on_cpu = frugal::detail::quantize_blockwise(values, true), on_gpu = frugal::detail::quantize_blockwise(values.cuda(), true);
  check_codes(on_gpu.codes.cpu(), on_cpu.codes, "quantize_blockwise");
  CHECK(torch::equal(frugal::detail::dequantize_blockwise({on_gpu.codes, on_gpu.absmax}, true).cpu(), frugal::detail::dequantize_blockwise(on_cpu, true)));
  auto sgd_run = [&](const torch::Device& device) {
    auto p = values.to(device).requires_grad_(true);
    QuantizedSGD opt(std::vector<torch::Tensor>{p}, torch::optim::SGDOptions(0.01).momentum(0.9).nesterov(true), StateQuantization().bits(8));
    for (int i = 0; i < 5; ++i) {
      p.mutable_grad() = (values * (i + 1)).to(device);
      opt.step();
    }
    return p.detach().cpu();
  };
  check_close(sgd_run(torch::Device(torch::kCUDA)), sgd_run(torch::kCPU), "8-bit SGD parameters");
}

namespace {

// The optimizer's serialized state after every optimizer-step boundary, and the skipped-step count.
struct StateRecorder : Policy {
  std::string name() const override { return "state_recorder"; }
  void on_step_end(StepContext& ctx) override {
    if (!ctx.boundary()) return;
    bytes.push_back(frugal::detail::optimizer_archive_bytes(ctx.optimizer()));
    skipped.push_back(ctx.state().skipped_steps);
  }
  std::vector<std::string> bytes;
  std::vector<int64_t> skipped;
};

}  // namespace

TEST_CASE("an fp16 overflow step leaves 8-bit states untouched, and training goes on", "[optim][precision]") {
  Seeded seeded;
  TinyNet net(4, 128, 3);  // fc1.weight 512 and fc2.weight 384 elements: 8-bit above 256
  Model model(net.ptr(), cross_entropy());
  Trainer trainer(model,
                  [](torch::nn::Module& m) {
                    return std::make_unique<FusedAdamW>(m.parameters(), torch::optim::AdamWOptions(1e-2),
                                                        StateQuantization().bits(8).min_elements(256));
                  },
                  blobs(64), TrainerOptions().device("cpu").run_dir("").max_steps(6), DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<MixedPrecisionPolicy>(MixedPrecisionOptions().mode(Precision::fp16).autocast(false)));
  trainer.add_policy(std::make_shared<GradientInjection>(net->fc1->weight, [](int64_t micro_step, const torch::Tensor& grad) {
    return micro_step == 3 ? torch::full_like(grad, INFINITY) : grad;
  }));
  auto recorder = std::make_shared<StateRecorder>();
  trainer.add_policy(recorder);
  trainer.fit();
  REQUIRE(recorder->bytes.size() >= 5);
  int overflows = 0;
  for (size_t i = 1; i < recorder->bytes.size(); ++i) {
    const bool skipped = recorder->skipped[i] > recorder->skipped[i - 1];
    INFO("step " << i << (skipped ? ": skipped" : ""));
    CHECK((recorder->bytes[i] == recorder->bytes[i - 1]) == skipped);  // untouched exactly when skipped
    overflows += skipped ? 1 : 0;
  }
  CHECK(overflows == 1);
  const auto& q = dynamic_cast<const QuantizedParamState&>(*trainer.optimizer().state().at(net->fc1->weight.unsafeGetTensorImpl()));
  CHECK(q.step() == static_cast<int64_t>(recorder->bytes.size()) - 1);  // every step but the skipped one
}

TEST_CASE("the recovery ladder's snapshots and rollbacks carry 8-bit states", "[optim][recovery]") {
  Seeded seeded;
  TinyNet net(4, 64, 3);  // fc1.weight 256 and fc2.weight 192 elements: 8-bit above 128
  auto base = blobs(64);
  std::vector<int64_t> all(64);
  for (int64_t k = 0; k < 64; ++k) all[static_cast<size_t>(k)] = k;
  const Batch batch = base->get_batch(all);
  torch::Tensor x = batch.input.clone();
  for (const int64_t b : {3, 4, 5}) x.slice(0, 8 * b, 8 * b + 8).fill_(std::nan(""));  // NaN losses at batches 3-5
  Trainer trainer(Model(net.ptr(), cross_entropy()),
                  [](torch::nn::Module& m) {
                    return std::make_unique<FusedAdamW>(m.parameters(), torch::optim::AdamWOptions(1e-2),
                                                        StateQuantization().bits(8).min_elements(128));
                  },
                  std::make_shared<TensorDataset>(x, batch.target),
                  TrainerOptions().device("cpu").run_dir("").max_epochs(1).log_every_n_steps(1000),
                  DataLoaderOptions().batch_size(8).shuffle(false));
  auto recovery = std::make_shared<RecoveryPolicy>(RecoveryOptions().repeat_window(4).snapshot_every_n_steps(1).snapshots(2).lr_window(100));
  trainer.add_policy(recovery);
  const FitResult result = trainer.fit();
  CHECK(recovery->rollbacks() == 2);  // as with fp32 states (tests/recovery)
  CHECK(result.state.step == 4);
  for (const auto& p : net->parameters()) CHECK(p.isfinite().all().item<bool>());
  const auto& q = dynamic_cast<const QuantizedParamState&>(*trainer.optimizer().state().at(net->fc1->weight.unsafeGetTensorImpl()));
  CHECK(q.moment(0).absmax.isfinite().all().item<bool>());
  CHECK(q.moment(1).absmax.isfinite().all().item<bool>());
  CHECK(q.step() == result.state.step);  // restored with the step it was snapshotted at, then stepped on
}

TEST_CASE("quantization picks the nearest code of the map, the lower one on a tie, at every magnitude", "[optim]") {
  Seeded seeded;
  for (const bool is_signed : {true, false}) {
    const torch::Tensor map = frugal::detail::dynamic_map(is_signed);
    // Values over ten decades, the codes themselves, and the midpoints between neighbouring codes.
    torch::Tensor values = torch::randn({256 * 200}) * torch::exp(torch::randn({256 * 200}) * 3);
    const torch::Tensor mids = (map.slice(0, 0, 255) + map.slice(0, 1)) / 2;
    values = torch::cat({values, map, mids, torch::zeros({256})});
    if (!is_signed) values = values.abs();
    const auto q = frugal::detail::quantize_blockwise(values, is_signed);
    const int64_t n = values.numel(), blocks = (n + 255) / 256;
    const torch::Tensor padded = torch::cat({values, torch::zeros({blocks * 256 - n})}).view({blocks, 256});
    const torch::Tensor top = padded.abs().amax(1, true);
    const torch::Tensor normed = torch::where(top > 0, padded / top, torch::zeros_like(padded)).reshape({-1}).slice(0, 0, n);
    const torch::Tensor expected = (normed.unsqueeze(1) - map.unsqueeze(0)).abs().argmin(1).to(torch::kUInt8);  // first = lower
    INFO((is_signed ? "signed" : "unsigned") << ": " << q.codes.ne(expected).sum().item<int64_t>() << " of " << n << " codes differ");
    CHECK(torch::equal(q.codes, expected));
    CHECK(torch::equal(q.absmax, top.reshape({-1})));
  }
}
