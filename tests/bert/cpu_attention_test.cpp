// The CPU training attention (hand-written backward) and the replayable dropout against autograd
// through the operations they stand for.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "frugal/models/cpu_gemm.hpp"
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

// The CPU attention over a padded [N, S] batch, back in [N, S, hidden].
torch::Tensor padded(const torch::Tensor& qkv, const torch::Tensor& real_tokens, double p) {
  const auto spans = frugal::detail::padded_spans(real_tokens);
  REQUIRE(spans.has_value());
  return frugal::detail::cpu_attention(qkv.view({kBatch * kSeq, 3 * kHidden}), *spans, kHeads, p).view({kBatch, kSeq, kHidden});
}

// The CPU attention over the real tokens only, packed, put back in [N, S, hidden] with zeros at padding.
torch::Tensor packed(const torch::Tensor& qkv, const torch::Tensor& real_tokens, double p) {
  const torch::Tensor index = real_tokens.flatten().nonzero().squeeze(1);
  const torch::Tensor lengths = real_tokens.sum(1);
  const std::vector<int64_t> length(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + kBatch);
  const torch::Tensor rows = frugal::detail::cpu_attention(qkv.view({kBatch * kSeq, 3 * kHidden}).index_select(0, index),
                                                            frugal::detail::packed_spans(length), kHeads, p);
  return torch::zeros({kBatch * kSeq, kHidden}).index_copy(0, index, rows).view({kBatch, kSeq, kHidden});
}

// The dropout multiplier the CPU attention applies, laid out as [N, heads, S, S]: its scores are
// [heads, S, keys] per sequence, end to end, under one stream.
torch::Tensor padded_keep(const torch::Tensor& real_tokens, const frugal::detail::DropoutStream& stream) {
  const torch::Tensor lengths = real_tokens.sum(1);
  const torch::Tensor flat = frugal::detail::apply_dropout(torch::ones({kHeads * kSeq * lengths.sum().item<int64_t>()}), stream);
  CHECK(flat.eq(0).to(torch::kDouble).mean().item<double>() == Approx(stream.p).margin(0.03));
  torch::Tensor keep = torch::zeros({kBatch, kHeads, kSeq, kSeq});
  int64_t at = 0;
  for (int64_t i = 0; i < kBatch; ++i) {
    const int64_t keys = lengths[i].item<int64_t>();
    keep[i].narrow(2, 0, keys).copy_(flat.narrow(0, at, kHeads * kSeq * keys).view({kHeads, kSeq, keys}));
    at += kHeads * kSeq * keys;
  }
  return keep;
}

}  // namespace

TEST_CASE("CPU attention: output and gradient equal autograd's, with padding and dropout", "[bert]") {
  Seeded seeded;
  const torch::Tensor qkv = torch::randn({kBatch, kSeq, 3 * kHidden});
  const torch::Tensor grad_out = torch::randn({kBatch, kSeq, kHidden});
  torch::Tensor real = torch::ones({kBatch, kSeq}, torch::kBool);
  real[1].narrow(0, 13, 7).fill_(false);  // padding in the second sequence
  real[2].narrow(0, 1, 19).fill_(false);  // and a sequence of one token

  SECTION("nothing dropped (p = 1e-12), with and without padding") {
    for (const torch::Tensor& tokens : {real, torch::ones({kBatch, kSeq}, torch::kBool)}) {
      const Run ours = run(qkv, grad_out, [&](const torch::Tensor& x) { return padded(x, tokens, 1e-12); });
      const Run theirs = run(qkv, grad_out, [&](const torch::Tensor& x) { return reference(x, tokens, torch::ones({1})); });
      CHECK(torch::allclose(ours.out, theirs.out, 1e-5, 1e-6));
      CHECK(torch::allclose(ours.grad, theirs.grad, 1e-5, 1e-6));
    }
  }
  SECTION("unpadded: the real tokens' output and every gradient equal the padded computation's") {
    // Padded queries have no output when unpadded, so no gradient flows from them on either side.
    const torch::Tensor real_grad_out = grad_out * real.unsqueeze(-1);
    const Run ours = run(qkv, real_grad_out, [&](const torch::Tensor& x) { return packed(x, real, 1e-12); });
    const Run theirs = run(qkv, real_grad_out, [&](const torch::Tensor& x) { return reference(x, real, torch::ones({1})); });
    CHECK(torch::allclose(ours.out, theirs.out * real.unsqueeze(-1), 1e-5, 1e-6));
    CHECK(torch::allclose(ours.grad, theirs.grad, 1e-5, 1e-6));
    CHECK(ours.grad.abs().sum().item<double>() > 0);
  }
  SECTION("p = 0.3: the same mask as the stream drawn from the same generator state, forward and backward") {
    // Without padding every sequence has the same length: all of them go through one batched
    // multiply per product, with oneDNN or MKL; with padding, one sequence at a time.
    const auto gemm = GENERATE(frugal::CpuGemm::onednn, frugal::CpuGemm::mkl);
    const frugal::CpuGemm saved = frugal::cpu_gemm();
    frugal::set_cpu_gemm(gemm);
    for (const torch::Tensor& tokens : {real, torch::ones({kBatch, kSeq}, torch::kBool)}) {
      torch::manual_seed(7);
      const Run ours = run(qkv, grad_out, [&](const torch::Tensor& x) { return padded(x, tokens, 0.3); });
      torch::manual_seed(7);
      const torch::Tensor keep = padded_keep(tokens, frugal::detail::draw_dropout_stream(0.3));
      CHECK(keep.eq(0).to(torch::kDouble).mean().item<double>() > 0.2);
      const Run theirs = run(qkv, grad_out, [&](const torch::Tensor& x) { return reference(x, tokens, keep); });
      CHECK(torch::allclose(ours.out, theirs.out, 1e-5, 1e-6));
      CHECK(torch::allclose(ours.grad, theirs.grad, 1e-5, 1e-6));
      const Run no_dropout = run(qkv, grad_out, [&](const torch::Tensor& x) { return reference(x, tokens, torch::ones({1})); });
      CHECK_FALSE(torch::allclose(ours.out, no_dropout.out, 1e-3, 1e-3));
    }
    frugal::set_cpu_gemm(saved);
  }
  SECTION("sequences of one length packed end to end (the batched path) equal the padded computation") {
    const torch::Tensor all = torch::ones({kBatch, kSeq}, torch::kBool);
    const Run ours = run(qkv, grad_out, [&](const torch::Tensor& x) { return packed(x, all, 1e-12); });
    const Run theirs = run(qkv, grad_out, [&](const torch::Tensor& x) { return reference(x, all, torch::ones({1})); });
    CHECK(torch::allclose(ours.out, theirs.out, 1e-5, 1e-6));
    CHECK(torch::allclose(ours.grad, theirs.grad, 1e-5, 1e-6));
  }
  SECTION("a mask that is not a prefix, or a row with no token, is left to the masked path") {
    torch::Tensor holes = torch::ones({kBatch, kSeq}, torch::kBool);
    holes[0][4] = false;
    CHECK_FALSE(frugal::detail::padded_spans(holes).has_value());
    torch::Tensor empty_row = real.clone();
    empty_row[2].fill_(false);
    CHECK_FALSE(frugal::detail::padded_spans(empty_row).has_value());
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

TEST_CASE("CPU dropout: the mask is the documented hash of (seed, pair), for any thread count and block", "[bert]") {
  Seeded seeded;
  // Element 2k is kept when the low 32 bits of SplitMix64(seed + k) are >= p * 2^32, element 2k + 1 by its high bits.
  auto splitmix64 = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const frugal::detail::DropoutStream stream{0x1234abcdull, 0.3};
  const auto threshold = static_cast<uint32_t>(0.3 * 4294967296.0);
  const int64_t n = 3 * (1 << 16) + 7;  // several parallel chunks and blocks, an odd tail
  std::vector<float> expected(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t hash = splitmix64(stream.seed + static_cast<uint64_t>(i / 2));
    const auto draw = static_cast<uint32_t>(i % 2 == 0 ? hash : hash >> 32);
    expected[static_cast<size_t>(i)] = draw >= threshold ? 1.0f / 0.7f : 0.0f;
  }
  const torch::Tensor reference = torch::from_blob(expected.data(), {n}).clone();
  for (const int threads : {1, 2}) {
    torch::set_num_threads(threads);
    CHECK(torch::equal(frugal::detail::apply_dropout(torch::ones({n}), stream), reference));
    CHECK(torch::equal(frugal::detail::apply_dropout(torch::ones({n}, torch::kHalf), stream), reference.to(torch::kHalf)));
  }
  torch::set_num_threads(1);
}
