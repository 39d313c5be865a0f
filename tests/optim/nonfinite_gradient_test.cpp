// One non-finite (or huge) gradient element in an 8-bit state's block stays in its own element:
// the block's maximum stays finite, every other element steps as if that gradient were 0, and the
// parameter alone goes non-finite where torch.optim's would. The same on the CPU and on CUDA.
#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <limits>

#include "optim/quantized_param_state.hpp"
#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

constexpr int64_t kElements = 4096, kPoisoned = 1000, kSteps = 5;

struct Outcome {
  torch::Tensor param;
  std::vector<torch::Tensor> codes, absmax;
};

enum class Kind { adamw, adam, sgd };

std::unique_ptr<torch::optim::Optimizer> make(Kind kind, const torch::Tensor& p) {
  const auto eight = StateQuantization().bits(8);
  const std::vector<torch::Tensor> params{p};
  switch (kind) {
    case Kind::adamw:
      return std::make_unique<FusedAdamW>(params, torch::optim::AdamWOptions(1e-3).weight_decay(0.01), eight);
    case Kind::adam:
      return std::make_unique<FusedAdam>(params, torch::optim::AdamOptions(1e-3), eight);
    case Kind::sgd:
      return std::make_unique<QuantizedSGD>(params, torch::optim::SGDOptions(0.01).momentum(0.9), eight);
  }
  return nullptr;
}

// kSteps steps from the same start; the first step's gradient has `first` at kPoisoned.
Outcome run(Kind kind, float first, const torch::Device& device, int64_t steps = kSteps) {
  torch::manual_seed(5);
  const torch::Tensor start = torch::randn({kElements});
  std::vector<torch::Tensor> grads;
  for (int64_t s = 0; s < steps; ++s) grads.push_back(torch::randn({kElements}) * 1e-2);
  grads[0][kPoisoned] = first;
  torch::Tensor p = start.to(device).requires_grad_(true);
  auto opt = make(kind, p);
  for (const auto& g : grads) {
    p.mutable_grad() = g.to(device);
    opt->step();
  }
  const auto& q = dynamic_cast<const QuantizedParamState&>(*opt->state().begin()->second);
  Outcome out{p.detach().cpu(), {}, {}};
  for (size_t m = 0; m < q.moment_count(); ++m) {
    out.codes.push_back(q.moment(m).codes.cpu());
    out.absmax.push_back(q.moment(m).absmax.cpu());
  }
  return out;
}

torch::Tensor others(const torch::Tensor& t) {
  return torch::cat({t.slice(0, 0, kPoisoned), t.slice(0, kPoisoned + 1)});
}

const char* name_of(Kind kind) { return kind == Kind::adamw ? "AdamW" : kind == Kind::adam ? "Adam" : "SGD momentum"; }

}  // namespace

TEST_CASE("a NaN, infinite or huge gradient element stays in its element of an 8-bit state's block", "[optim][kernels]") {
  Seeded seeded;
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (const Kind kind : {Kind::adamw, Kind::adam, Kind::sgd}) {
    const Outcome clean = run(kind, 0.0f, torch::kCPU);
    for (const float poison : {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1e30f}) {
      INFO(name_of(kind) << ", gradient element " << poison);
      const Outcome out = run(kind, poison, torch::kCPU);
      for (const auto& a : out.absmax) CHECK(a.isfinite().all().item<bool>());
      // Only the poisoned parameter may go non-finite, and only where torch.optim's does.
      const bool torch_goes_nonfinite = !std::isfinite(poison);
      CHECK(others(out.param).isfinite().all().item<bool>());
      CHECK(std::isfinite(out.param[kPoisoned].item<float>()) == !torch_goes_nonfinite);
      if (std::isnan(poison)) {
        // The element's state restarts from 0, as the clean run's does with a zero gradient:
        // every other parameter and every code equal the clean run's, bitwise, after every step.
        CHECK(torch::equal(others(out.param), others(clean.param)));
        for (size_t m = 0; m < out.codes.size(); ++m) {
          CHECK(torch::equal(out.codes[m], clean.codes[m]));
          CHECK(torch::equal(out.absmax[m], clean.absmax[m]));
        }
      }
    }
    // After the poisoned step alone: an infinity leaves the block's maximum and every other
    // code as a zero gradient does.
    const Outcome clean_once = run(kind, 0.0f, torch::kCPU, 1);
    for (const float poison : {inf, -inf}) {
      INFO(name_of(kind) << ", one step, gradient element " << poison);
      const Outcome once = run(kind, poison, torch::kCPU, 1);
      CHECK(torch::equal(others(once.param), others(clean_once.param)));
      for (size_t m = 0; m < once.codes.size(); ++m) {
        CHECK(torch::equal(others(once.codes[m]), others(clean_once.codes[m])));
        CHECK(torch::equal(once.absmax[m], clean_once.absmax[m]));
      }
    }
  }
}

TEST_CASE("non-finite and huge gradient elements: the CUDA kernels give the CPU kernels' bits", "[optim][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (the 8-bit CUDA kernels)\n";
    return;
  }
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (const Kind kind : {Kind::adamw, Kind::adam, Kind::sgd}) {
    for (const float poison : {0.0f, std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1e30f}) {
      INFO(name_of(kind) << ", gradient element " << poison);
      const Outcome cpu = run(kind, poison, torch::kCPU), gpu = run(kind, poison, torch::Device(torch::kCUDA));
      CHECK(torch::equal(cpu.param.isnan(), gpu.param.isnan()));
      CHECK(torch::equal(torch::nan_to_num(cpu.param), torch::nan_to_num(gpu.param)));
      for (size_t m = 0; m < cpu.codes.size(); ++m) {
        CHECK(torch::equal(cpu.codes[m], gpu.codes[m]));
        CHECK(torch::equal(cpu.absmax[m], gpu.absmax[m]));
      }
    }
  }
}
