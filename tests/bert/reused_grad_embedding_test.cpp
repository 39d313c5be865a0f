// The word embeddings' gradient written into storage kept between steps: the same gradient as
// at::embedding's, and a gradient still held is never overwritten.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "models/detail/reused_grad_embedding.hpp"
#include "support/fixtures.hpp"

using namespace frugal::testing;

namespace {

torch::Tensor grad_of(const torch::Tensor& weight, const torch::Tensor& ids, const torch::Tensor& upstream,
                      const std::shared_ptr<frugal::detail::GradStorage>& storage) {
  weight.mutable_grad() = torch::Tensor();
  const torch::Tensor out = storage ? frugal::detail::reused_grad_embedding(weight, ids, 0, storage) : at::embedding(weight, ids, 0);
  out.backward(upstream);
  return weight.grad();
}

}  // namespace

TEST_CASE("embedding with a reused gradient: at::embedding's gradient, and no live gradient overwritten", "[bert]") {
  Seeded seeded;
  const torch::Tensor weight = torch::randn({50, 8}).requires_grad_(true);
  const torch::Tensor ids = torch::randint(0, 50, {4, 12});  // repeats, and the padding id 0
  ids[0][0] = 0;
  const torch::Tensor upstream = torch::randn({4, 12, 8});
  const auto storage = std::make_shared<frugal::detail::GradStorage>();

  const torch::Tensor expected = grad_of(weight, ids, upstream, nullptr);
  REQUIRE(expected[0].abs().sum().item<double>() == 0.0);  // the padding row gets nothing
  torch::Tensor first = grad_of(weight, ids, upstream, storage);
  CHECK(torch::allclose(first, expected, 1e-6, 1e-6));
  const void* first_data = first.data_ptr();

  // `first` is still held here: the next backward must not write into it.
  const torch::Tensor first_copy = first.clone();
  torch::Tensor second = grad_of(weight, ids, upstream * 2, storage);
  CHECK(torch::equal(first, first_copy));
  CHECK(second.data_ptr() != first_data);
  CHECK(torch::allclose(second, expected * 2, 1e-6, 1e-6));

  // Once released (as zero_grad(set_to_none) does), the kept storage is used again, zeroed first.
  const void* second_data = second.data_ptr();
  first = second = weight.mutable_grad() = torch::Tensor();
  const torch::Tensor third = grad_of(weight, ids, upstream, storage);
  CHECK(third.data_ptr() == second_data);
  CHECK(torch::allclose(third, expected, 1e-6, 1e-6));
}
