// Data parallelism inside one process: the gradient buckets (launched during backward, in bucket
// order, averaged), evaluation shards, and what the Trainer does once a policy brings a
// communicator. Several processes: data_parallel_probe.cpp with data_parallel_test.sh.
#include <catch2/catch.hpp>

#include <set>

#include "distributed/gradient_buckets.hpp"
#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

// Rank 0 of two ranks whose twin computes exactly the same: a sum doubles every element. Records
// the size of each all-reduce it was asked to start, in order.
class TwinCommunicator : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 2; }
  std::string backend() const override { return "twin"; }
  void all_reduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override {
    for (auto& t : tensors) {
      if (op == ReduceOp::sum) t.mul_(2);
    }
  }
  std::unique_ptr<PendingCollective> start_all_reduce(torch::Tensor flat, ReduceOp) override {
    started.push_back(flat.numel());
    flat.mul_(2);
    return SingleProcessCommunicator().start_all_reduce(flat, ReduceOp::sum);
  }
  void broadcast(std::vector<torch::Tensor>&, int64_t) override {}
  void barrier() override {}
  bool any(bool local) override { return local; }
  std::vector<int64_t> started;
};

struct DeepNetImpl : torch::nn::Module {
  DeepNetImpl() {
    for (int i = 0; i < 4; ++i) layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(32, 32)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : layers) x = torch::tanh(l->forward(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.grad().clone());
  return out;
}

}  // namespace

TEST_CASE("gradient buckets start during backward, last layer first, and leave the mean in .grad", "[distributed]") {
  Seeded seeded;
  DeepNetImpl net;
  const auto params = net.parameters();
  const auto input = torch::randn({8, 32});
  net.forward(input).sum().backward();
  const auto expected = grads_of(params);
  for (auto& p : params) p.mutable_grad().reset();

  for (bool overlap : {true, false}) {
    TwinCommunicator twin;
    // One layer (weight 4 KiB + bias) per bucket.
    frugal::detail::GradientBuckets buckets(params, 32 * 33 * 4, twin, overlap);
    CHECK(buckets.size() == 4);
    buckets.arm();
    net.forward(input).sum().backward();
    const size_t during_backward = twin.started.size();
    buckets.finish();
    INFO("overlap " << overlap);
    CHECK(during_backward == (overlap ? 4u : 0u));
    CHECK(twin.started.size() == 4u);
    const auto reduced = grads_of(params);
    for (size_t i = 0; i < params.size(); ++i) CHECK(torch::allclose(reduced[i], expected[i], 1e-6, 1e-7));
    for (auto& p : params) p.mutable_grad().reset();

    // A backward that was not armed (a micro-step inside an accumulation window) starts nothing.
    net.forward(input).sum().backward();
    buckets.finish();
    CHECK(twin.started.size() == 4u);
    for (auto& p : params) p.mutable_grad().reset();
  }
}

TEST_CASE("a parameter this rank did not use counts as a zero gradient in the mean", "[distributed]") {
  Seeded seeded;
  DeepNetImpl net;
  const auto params = net.parameters();
  TwinCommunicator twin;
  frugal::detail::GradientBuckets buckets(params, 1 << 20, twin, true);
  buckets.arm();
  net.layers[0]->forward(torch::randn({2, 32})).sum().backward();  // only fc0 gets gradients
  buckets.finish();
  CHECK(twin.started.size() == 1u);
  CHECK(params[0].grad().defined());
  CHECK_FALSE(params.back().grad().defined());  // zero on every rank: stays without a gradient
}

TEST_CASE("evaluation shards cover every example exactly once, sizes differing by at most one", "[distributed][data]") {
  auto data = std::make_shared<TensorDataset>(torch::arange(10, torch::kLong), torch::Tensor());
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader(data, DataLoaderOptions().batch_size(2).shuffle(true).num_replicas(3).rank(rank).even_shards(false));
    CHECK(loader.examples_per_epoch() == (rank == 0 ? 4 : 3));
    while (auto b = loader.next()) {
      for (int64_t i = 0; i < b->size(); ++i) seen.insert(b->input[i].item<int64_t>());
    }
  }
  CHECK(seen == std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("replication hands the Trainer a communicator: it reads its rank's share", "[distributed][trainer]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(64), TrainerOptions().device("cpu"),
                  DataLoaderOptions().batch_size(8));
  CHECK(trainer.batches_per_epoch() == 8);
  CHECK(trainer.world_size() == 1);
  trainer.replicate({std::make_shared<TwinCommunicator>()});
  CHECK(trainer.world_size() == 2);
  CHECK(trainer.data_options().num_replicas() == 2);
  CHECK(trainer.batches_per_epoch() == 4);
  CHECK_THROWS_WITH(trainer.replicate({std::make_shared<TwinCommunicator>()}), Catch::Contains("the Trainer replicates already"));

  Trainer mismatched(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64), TrainerOptions().device("cpu"),
                     DataLoaderOptions().num_replicas(4));
  CHECK_THROWS_WITH(mismatched.replicate({std::make_shared<TwinCommunicator>()}),
                    Catch::Contains("num_replicas is 4 but the world has 2 ranks"));
}

TEST_CASE("the run answers policies' questions about the ranks without handing out its parts", "[distributed][trainer]") {
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(64), TrainerOptions().device("cpu"),
                  DataLoaderOptions().batch_size(8));
  const TrainingRun& run = trainer;
  const torch::Tensor figures = torch::tensor({1.5, 2.0});
  CHECK(torch::equal(run.reduce_across_ranks(figures, ReduceOp::sum), figures));  // one process: its own values
  CHECK(run.any_rank(true));
  CHECK_FALSE(run.any_rank(false));
  CHECK(run.gradient_bytes() == 0);  // no backward yet
  CHECK(run.optimizer_sharding() == nullptr);

  const torch::Tensor bucket = torch::zeros({100});
  trainer.replicate({std::make_shared<TwinCommunicator>(), nullptr,
                     [bucket] { return std::vector<torch::Tensor>{bucket, bucket.narrow(0, 0, 10)}; }});
  CHECK(torch::equal(run.reduce_across_ranks(figures, ReduceOp::sum), torch::tensor({3.0, 4.0})));  // the twin's sum
  CHECK(torch::equal(figures, torch::tensor({1.5, 2.0})));  // the caller's tensor is left as it was
  CHECK(run.gradient_bytes() == 400);  // the bucket once, though held twice
  std::vector<torch::Tensor> grads;
  for (auto& p : net->parameters()) grads.push_back(p.mutable_grad() = torch::zeros_like(p));
  CHECK(run.gradient_bytes() == 400 + storage_bytes(grads));
  CHECK(run.optimizer_sharding() == nullptr);
}

TEST_CASE("a data-parallel policy whose ranks the Trainer was not handed is refused before training", "[distributed][trainer]") {
  Seeded seeded;
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64), TrainerOptions().device("cpu").run_dir(""),
                  DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<DataParallelPolicy>(std::make_shared<TwinCommunicator>()));  // not add_data_parallel
  CHECK_THROWS_WITH(trainer.fit(), Catch::Contains("add_data_parallel(trainer, policy)"));
  CHECK(trainer.state().step == 0);
}

TEST_CASE("DataParallelPolicy options are checked", "[distributed]") {
  CHECK_THROWS_WITH(DataParallelPolicy(nullptr), Catch::Contains("communicator is null"));
  CHECK_THROWS_WITH(DataParallelPolicy(std::make_shared<SingleProcessCommunicator>(), DataParallelOptions().bucket_cap_mb(0)),
                    Catch::Contains("bucket_cap_mb must be > 0, got 0"));
}
