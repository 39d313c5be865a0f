// BERT's CPU GELU for training: torch::gelu's values, gradients against float64 GELU's, the same
// gradient at any thread count, and ATen's GELU wherever it does not apply.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "models/detail/gelu.hpp"
#include "support/fixtures.hpp"

using namespace frugal::testing;

namespace {

// Every regime: the far tails (Phi 0 or 1, exp underflowing), the middle, and normal draws.
torch::Tensor inputs() { return torch::cat({torch::linspace(-30, 30, 60001), 3 * torch::randn({100000})}); }

double largest_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("CPU GELU: torch::gelu's values, gradients within 1e-6 of float64 GELU's", "[bert][gelu]") {
  Seeded seeded;
  const torch::Tensor x = inputs().requires_grad_(true);
  const torch::Tensor upstream = torch::randn_like(x);
  const torch::Tensor y = frugal::detail::gelu(x);
  y.backward(upstream);
  CHECK(torch::equal(y.detach(), torch::gelu(x.detach())));
  const torch::Tensor x64 = x.detach().to(torch::kDouble);
  const torch::Tensor grad64 = at::gelu_backward(upstream.to(torch::kDouble), x64);
  const double ours = largest_difference(x.grad(), grad64);
  const double aten = largest_difference(at::gelu_backward(upstream, x.detach()), grad64);
  INFO("largest gradient difference from float64: ours " << ours << ", ATen's in float32 " << aten);
  CHECK(ours < 1e-6 * upstream.abs().max().item<double>());
  CHECK(y.grad_fn()->name() != "GeluBackward0");  // the path under test was taken
}

TEST_CASE("CPU GELU: the same gradient at 1 and 2 threads, for a non-contiguous input", "[bert][gelu]") {
  Seeded seeded;
  const torch::Tensor base = torch::randn({300, 700});
  auto run = [&](int threads) {
    torch::set_num_threads(threads);
    const torch::Tensor x = base.t().requires_grad_(true);  // transposed: not contiguous
    const torch::Tensor y = frugal::detail::gelu(x);
    y.backward(torch::arange(y.numel(), torch::kFloat).view(y.sizes()) / y.numel());  // a different value at each place
    return std::make_pair(y.detach(), x.grad());
  };
  const auto one = run(1), two = run(2);
  torch::set_num_threads(1);
  // (The values are torch::gelu's; oneDNN's kernel may round differently at another thread count.)
  CHECK(torch::equal(one.second, two.second));
  const torch::Tensor x = base.t().requires_grad_(true);
  const torch::Tensor expected = torch::autograd::grad({torch::gelu(x)}, {x}, {torch::arange(x.numel(), torch::kFloat).view(x.sizes()) / x.numel()})[0];
  CHECK(torch::allclose(one.second, expected, 0, 1e-6));
}

TEST_CASE("CPU GELU: torch::gelu without gradients, for float64, and under create_graph", "[bert][gelu]") {
  Seeded seeded;
  const torch::Tensor x = torch::randn({1000});
  CHECK(torch::equal(frugal::detail::gelu(x), torch::gelu(x)));  // eval: exactly torch's
  const torch::Tensor x64 = torch::randn({1000}, torch::kDouble).requires_grad_(true);
  CHECK(frugal::detail::gelu(x64).grad_fn()->name() == "GeluBackward0");
  // Second derivatives: the backward pass is differentiable when it must be.
  const torch::Tensor xs = torch::randn({1000}).requires_grad_(true);
  const torch::Tensor grad = torch::autograd::grad({frugal::detail::gelu(xs).sum()}, {xs}, {}, true, true)[0];
  const torch::Tensor second = torch::autograd::grad({grad.sum()}, {xs})[0];
  const torch::Tensor xr = xs.detach().requires_grad_(true);
  const torch::Tensor grad_ref = torch::autograd::grad({torch::gelu(xr).sum()}, {xr}, {}, true, true)[0];
  const torch::Tensor second_ref = torch::autograd::grad({grad_ref.sum()}, {xr})[0];
  CHECK(torch::allclose(second, second_ref, 1e-5, 1e-6));
}
