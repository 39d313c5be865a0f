// The CPU training attention (hand-written backward) and the replayable dropout against autograd
// through the operations they stand for.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "models/detail/cpu_attention.hpp"
#include "models/detail/dropout.hpp"
#include "support/fixtures.hpp"


using namespace frugal::testing;

namespace {

constexpr int64_t kBatch = 3, kSeq = 20, kHeads = 4, kHidden = 64;

// Attention through differentiable ATen operations, with a given multiplier on the probabilities
// (the dropout mask, or ones).
torch::Tensor reference(const torch::Tensor& qkv, const torch::Tensor& real_tokens, const torch::Tensor& keep) {
  const int64_t d = kHidden / kHeads;
  const auto parts = qkv.view({kBatch, kSeq, 3, kHeads, d}).permute({2, 0, 3, 1, 4}).unbind(0);
  torch::Tensor scores = torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  scores = scores.masked_fill(real_tokens.logical_not().view({kBatch, 1, 1, kSeq}), -std::numeric_limits<double>::infinity());
  const torch::Tensor context = torch::matmul(torch::softmax(scores, -1) * keep, parts[2]);
  return context.transpose(1, 2).reshape({kBatch, kSeq, kHidden});
}

struct Run {
  torch::Tensor out, grad;
};

template <class F>
Run run(const torch::Tensor& qkv_values, const torch::Tensor& grad_out, F&& attention) {
  const torch::Tensor qkv = qkv_values.clone().requires_grad_(true);
  const torch::Tensor out = attention(qkv);
  out.backward(grad_out);
  return {out.detach(), qkv.grad()};
}

}  // namespace

TEST_CASE("CPU attention: output and gradient equal autograd's, with padding and dropout", "[bert]") {
  Seeded seeded;
  const torch::Tensor qkv = torch::randn({kBatch, kSeq, 3 * kHidden});
  const torch::Tensor grad_out = torch::randn({kBatch, kSeq, kHidden});
  torch::Tensor real = torch::ones({kBatch, kSeq}, torch::kBool);
  real[1].narrow(0, 13, 7).fill_(false);  // padding in the second sequence

  SECTION("nothing dropped (p = 1e-12), with and without padding") {
    for (const torch::Tensor& tokens : {real, torch::ones({kBatch, kSeq}, torch::kBool)}) {
      const Run ours = run(qkv, grad_out, [&](const torch::Tensor& x) { return frugal::detail::cpu_attention(x, tokens, kHeads, 1e-12); });
      const Run theirs = run(qkv, grad_out, [&](const torch::Tensor& x) { return reference(x, tokens, torch::ones({1})); });
      CHECK(torch::allclose(ours.out, theirs.out, 1e-5, 1e-6));
      CHECK(torch::allclose(ours.grad, theirs.grad, 1e-5, 1e-6));
    }
  }
  SECTION("p = 0.3: the same mask as the stream drawn from the same generator state, forward and backward") {
    torch::manual_seed(7);
    const Run ours = run(qkv, grad_out, [&](const torch::Tensor& x) { return frugal::detail::cpu_attention(x, real, kHeads, 0.3); });
    torch::manual_seed(7);
    const frugal::detail::DropoutStream stream = frugal::detail::draw_dropout_stream(0.3);
    const torch::Tensor keep = frugal::detail::apply_dropout(torch::ones({kBatch, kHeads, kSeq, kSeq}), stream);
    CHECK(keep.eq(0).to(torch::kDouble).mean().item<double>() == Approx(0.3).margin(0.03));
    const Run theirs = run(qkv, grad_out, [&](const torch::Tensor& x) { return reference(x, real, keep); });
    CHECK(torch::allclose(ours.out, theirs.out, 1e-5, 1e-6));
    CHECK(torch::allclose(ours.grad, theirs.grad, 1e-5, 1e-6));
    const Run no_dropout = run(qkv, grad_out, [&](const torch::Tensor& x) { return reference(x, real, torch::ones({1})); });
    CHECK_FALSE(torch::allclose(ours.out, no_dropout.out, 1e-3, 1e-3));
  }
}

TEST_CASE("CPU dropout: the backward pass replays the forward mask", "[bert]") {
  Seeded seeded;
  const torch::Tensor x = (torch::rand({1001}) + 0.5).requires_grad_(true);  // odd length: the last pair is half used
  const torch::Tensor y = frugal::detail::dropout(x, 0.25, /*training=*/true);
  y.backward(torch::ones_like(y));
  const torch::Tensor kept = y.detach().ne(0);
  CHECK(torch::equal(x.grad(), kept.to(torch::kFloat) / 0.75));
  CHECK(torch::allclose(y.detach(), x.detach() * kept / 0.75));
  CHECK(kept.to(torch::kDouble).mean().item<double>() == Approx(0.75).margin(0.04));
  CHECK(torch::equal(frugal::detail::dropout(x, 0.25, /*training=*/false), x));
}
