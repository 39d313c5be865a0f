// DataLoader: deterministic shuffling by seed, exact restore, replica sharding, options.
#include <catch2/catch.hpp>

#include <set>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {
// A dataset whose input is the example index, to see the order.
std::shared_ptr<TensorDataset> indices(int64_t n) {
  return std::make_shared<TensorDataset>(torch::arange(n, torch::kLong), torch::Tensor());
}
std::vector<int64_t> epoch_order(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<int64_t> order;
  while (auto b = loader.next()) {
    for (int64_t i = 0; i < b->size(); ++i) order.push_back(b->input[i].item<int64_t>());
  }
  return order;
}
}  // namespace

TEST_CASE("the order depends on seed and epoch only, and covers every example once", "[data]") {
  DataLoader a(indices(50), DataLoaderOptions().batch_size(8).seed(3));
  DataLoader b(indices(50), DataLoaderOptions().batch_size(8).seed(3));
  torch::manual_seed(1);  // the global RNG must not matter
  const auto a0 = epoch_order(a, 0);
  torch::manual_seed(2);
  CHECK(a0 == epoch_order(b, 0));
  CHECK(a0 != epoch_order(a, 1));
  DataLoader c(indices(50), DataLoaderOptions().batch_size(8).seed(4));
  CHECK(a0 != epoch_order(c, 0));
  CHECK(std::set<int64_t>(a0.begin(), a0.end()).size() == 50);
  CHECK(a.batches_per_epoch() == 7);
  DataLoader d(indices(50), DataLoaderOptions().batch_size(8).drop_last(true).shuffle(false));
  CHECK(d.batches_per_epoch() == 6);
  CHECK(epoch_order(d, 0).front() == 0);
}

TEST_CASE("a restored position continues with exactly the batches that would have come", "[data]") {
  DataLoader full(indices(40), DataLoaderOptions().batch_size(4).seed(9));
  full.start_epoch(2);
  for (int i = 0; i < 3; ++i) full.next();
  const DataPosition saved = full.position();
  CHECK(saved.epoch == 2);
  CHECK(saved.batch_index == 3);
  DataLoader resumed(indices(40), DataLoaderOptions().batch_size(4).seed(9));
  resumed.restore(saved);
  while (full.has_next()) CHECK(torch::equal(full.next()->input, resumed.next()->input));
  CHECK_FALSE(resumed.has_next());
  DataLoader other_seed(indices(40), DataLoaderOptions().batch_size(4).seed(10));
  CHECK_THROWS_WITH(other_seed.restore(saved), Catch::Contains("seed 9") && Catch::Contains("seed 10"));
}

TEST_CASE("replicas read disjoint, equally sized shares of each epoch", "[data]") {
  std::multiset<int64_t> seen;
  std::vector<size_t> sizes;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader(indices(30), DataLoaderOptions().batch_size(4).seed(5).num_replicas(3).rank(rank));
    auto order = epoch_order(loader, 1);
    sizes.push_back(order.size());
    seen.insert(order.begin(), order.end());
  }
  CHECK(sizes == std::vector<size_t>{10, 10, 10});
  CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 30);
  CHECK(seen.size() == 30);
}

TEST_CASE("bad loader options name the field and value", "[data]") {
  CHECK_THROWS_WITH(DataLoader(indices(4), DataLoaderOptions().batch_size(0)), "batch_size must be >= 1, got 0");
  CHECK_THROWS_WITH(DataLoader(indices(4), DataLoaderOptions().num_replicas(2).rank(2)), "rank must be in [0, 2), got 2");
  CHECK_THROWS_WITH(TensorDataset(torch::zeros({4, 2}), torch::zeros({3})), Catch::Contains("targets hold 3"));
}
