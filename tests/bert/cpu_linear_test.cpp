// Linear layers through oneDNN on the CPU: at::linear's output and gradients, taken only where
// it applies (float32, big enough, not under autocast, oneDNN chosen).
#include <catch2/catch.hpp>

#include <iostream>
#include <torch/torch.h>

#include "frugal/frugal.hpp"
#include "models/detail/cpu_linear.hpp"
#include "support/fixtures.hpp"

using namespace frugal::testing;

namespace {

struct Grads {
  torch::Tensor out, x, weight, bias;
};

// Output and gradients of a linear layer from `f`, backward run twice so gradients accumulate.
template <typename F>
Grads run(F f, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& upstream) {
  const torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  const torch::Tensor b = b0.defined() ? b0.clone().requires_grad_(true) : torch::Tensor();
  Grads g;
  for (int i = 0; i < 2; ++i) {
    g.out = f(x, w, b);
    g.out.backward(upstream);
  }
  return {g.out, x.grad(), w.grad(), b.defined() ? b.grad() : torch::Tensor()};
}

void check_close(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  INFO("largest difference " << (a - b).abs().max().item<double>() << " of values up to " << b.abs().max().item<double>());
  CHECK(torch::allclose(a, b, 1e-5, 1e-4));
}

struct GemmChoice {  // restores the process-wide choice when a test ends
  frugal::CpuGemm saved = frugal::cpu_gemm();
  ~GemmChoice() { frugal::set_cpu_gemm(saved); }
};

}  // namespace

TEST_CASE("oneDNN linear: at::linear's output and gradients, with and without a bias", "[bert]") {
  if (!frugal::detail::onednn_matmul_works_here()) {
    std::cout << "SKIPPED: LibTorch's oneDNN matmul refuses float32 on this CPU (no avx512bw/vl/dq or avx_ne_convert)\n";
    return;
  }
  Seeded seeded;
  GemmChoice restore;
  frugal::set_cpu_gemm(frugal::CpuGemm::onednn);
  const torch::Tensor w = torch::randn({256, 192}) * 0.1, b = torch::randn({256});
  // Rows in oneDNN's blocks of 128 and MKL's rest (210), blocks only (256), the rest only (100).
  for (const int64_t rows : {210, 256, 100}) {
    const torch::Tensor x = torch::randn({rows / 2, 2, 192}) * 3;
    const torch::Tensor upstream = torch::randn({rows / 2, 2, 256});
    REQUIRE(frugal::detail::onednn_linear_usable(x, w));
    for (const torch::Tensor& bias : {b, torch::Tensor()}) {
      INFO("rows " << rows << (bias.defined() ? " with a bias" : " without a bias"));
      const Grads ours = run([](auto& x_, auto& w_, auto& b_) { return frugal::detail::linear(x_, w_, b_); }, x, w, bias, upstream);
      const Grads ref = run([](auto& x_, auto& w_, auto& b_) { return torch::linear(x_, w_, b_); }, x, w, bias, upstream);
      check_close(ours.out, ref.out);
      check_close(ours.x, ref.x);
      check_close(ours.weight, ref.weight);
      if (bias.defined()) check_close(ours.bias, ref.bias);
    }
  }
  // Second derivatives (create_graph), as at::linear gives them.
  {
    const torch::Tensor x = (torch::randn({210, 192}) * 0.1).requires_grad_(true), w2 = w.clone().requires_grad_(true);
    auto second = [&](const torch::Tensor& out) {
      const torch::Tensor grad_x = torch::autograd::grad({out.pow(2).sum()}, {x}, {}, true, /*create_graph=*/true)[0];
      return torch::autograd::grad({grad_x.pow(2).sum()}, {w2})[0];
    };
    check_close(second(frugal::detail::linear(x, w2, b)), second(torch::linear(x, w2, b)));
  }
  // A non-contiguous input (a transposed view) and one needing no input gradient.
  const torch::Tensor xt = torch::randn({192, 210}).t();
  const torch::Tensor wg = w.clone().requires_grad_(true);
  const torch::Tensor upstream = torch::randn({210, 256});
  frugal::detail::linear(xt, wg, b).backward(upstream);
  check_close(wg.grad(), upstream.t().mm(xt));
}

TEST_CASE("oneDNN linear is not taken for MKL, other dtypes, autocast or small multiplies", "[bert]") {
  Seeded seeded;
  GemmChoice restore;
  const torch::Tensor x = torch::randn({256, 128}), w = torch::randn({256, 128});
  frugal::set_cpu_gemm(frugal::CpuGemm::onednn);
  // Taken wherever LibTorch's oneDNN matmul takes float32 on this CPU, never elsewhere.
  CHECK(frugal::detail::onednn_linear_usable(x, w) == frugal::detail::onednn_matmul_works_here());
  CHECK_FALSE(frugal::detail::onednn_linear_usable(x.to(torch::kDouble), w.to(torch::kDouble)));
  CHECK_FALSE(frugal::detail::onednn_linear_usable(torch::randn({8, 128}), w));  // 8 x 128 x 256: MKL's call is cheaper
  {
    frugal::AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
    CHECK_FALSE(frugal::detail::onednn_linear_usable(x, w));
    CHECK(frugal::detail::linear(x, w, torch::Tensor()).scalar_type() == torch::kBFloat16);  // autocast still applies
  }
  frugal::set_cpu_gemm(frugal::CpuGemm::mkl);
  CHECK_FALSE(frugal::detail::onednn_linear_usable(x, w));
  CHECK(frugal::parse_enum_option<frugal::CpuGemm>("mkl", "cpu_gemm") == frugal::CpuGemm::mkl);
  CHECK(frugal::parse_enum_option<frugal::CpuGemm>("onednn", "cpu_gemm") == frugal::CpuGemm::onednn);
  CHECK_THROWS_WITH(frugal::parse_enum_option<frugal::CpuGemm>("blas", "model.cpu_gemm"), Catch::Contains("model.cpu_gemm") && Catch::Contains("blas"));
}

TEST_CASE("BERT in training with oneDNN linear layers: MKL's loss and gradients, padded and unpadded", "[bert]") {
  if (!frugal::detail::onednn_matmul_works_here()) {
    std::cout << "SKIPPED: LibTorch's oneDNN matmul refuses float32 on this CPU (no avx512bw/vl/dq or avx_ne_convert)\n";
    return;
  }
  Seeded seeded;
  GemmChoice restore;
  frugal::BertConfig c = frugal::BertConfig::preset("tiny");
  c.hidden_size = 128;  // 4 x 128 tokens x 128 x 128: big enough for oneDNN
  c.intermediate_size = 512;
  c.num_attention_heads = 2;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.1;
  frugal::BertForQuestionAnswering net(c);
  const torch::Tensor ids = torch::randint(1, c.vocab_size, {4, 128});
  const torch::Tensor mask = torch::arange(128).unsqueeze(0).lt(torch::tensor({128, 100, 77, 128}).unsqueeze(1)).to(torch::kInt64);
  REQUIRE(frugal::detail::onednn_linear_usable(torch::zeros({4 * 77, c.hidden_size}), torch::zeros({c.hidden_size, c.hidden_size})));
  for (const bool unpad : {false, true}) {
    INFO((unpad ? "unpadded" : "padded"));
    net->bert->set_unpad(unpad);
    auto loss_and_grads = [&](frugal::CpuGemm gemm) {
      frugal::set_cpu_gemm(gemm);
      net->zero_grad();
      torch::manual_seed(7);  // the same dropout masks
      auto [start, end] = net->forward(ids, torch::zeros_like(ids), mask);
      const torch::Tensor loss = frugal::question_answering_loss(start, end, torch::tensor({3, 50, 1, 90}), torch::tensor({9, 60, 2, 120}));
      loss.backward();
      std::vector<torch::Tensor> grads{loss.detach()};
      for (const auto& p : net->parameters()) grads.push_back(p.grad().clone());
      return grads;
    };
    const auto mkl = loss_and_grads(frugal::CpuGemm::mkl), onednn = loss_and_grads(frugal::CpuGemm::onednn);
    CHECK(std::abs(onednn[0].item<double>() - mkl[0].item<double>()) < 1e-5);
    for (size_t i = 1; i < mkl.size(); ++i) {
      INFO("parameter " << net->named_parameters()[i - 1].key());
      CHECK(torch::allclose(onednn[i], mkl[i], 1e-3, 1e-5));
    }
  }
}
