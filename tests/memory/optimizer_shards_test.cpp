// Sharded optimizer state inside one process: the bucket layout every rank derives, the
// optimizer's state carried from one layout to another (N ranks to M, sharded to whole and back),
// attaching the shards to an optimizer, and counting memory. Across processes:
// tests/distributed/sharding_test.sh.
#include <catch2/catch.hpp>

#include <torch/optim/lbfgs.h>

#include <sstream>

#include "distributed/detail/bucket_layout.hpp"
#include "optim/portable_state.hpp"
#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fd = frugal::detail;

namespace {

std::string serialized(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

struct MixedNetImpl : torch::nn::Module {
  MixedNetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 5, 3)));
    fc = register_module("fc", torch::nn::Linear(7, 11));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({11})));
  }
  torch::Tensor loss() {
    torch::Tensor a = conv->forward(torch::randn({2, 3, 6, 6})).mean();
    return a + norm->forward(fc->forward(torch::randn({4, 7}))).pow(2).mean();
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};

std::unique_ptr<torch::optim::AdamW> adamw_with_groups(torch::nn::Module& m) {
  return std::make_unique<torch::optim::AdamW>(weight_decay_groups(m, torch::optim::AdamWOptions(0.01).weight_decay(0.1), is_bias_or_norm),
                                               torch::optim::AdamWOptions(0.01));
}

}  // namespace

TEST_CASE("sharding layout: every rank's chunk is equal and the pieces of all ranks cover every parameter once", "[memory]") {
  Seeded seeded;
  std::vector<torch::Tensor> params;
  for (const int64_t n : {7, 130, 1, 64, 33, 500, 2}) params.push_back(torch::zeros({n}));
  for (const int64_t world : {1, 2, 3, 4, 7}) {
    const auto buckets = fd::bucket_layout(params, 400, world);
    std::vector<int64_t> seen_total(params.size(), 0);
    for (int64_t r = 0; r < world; ++r) {
      for (const auto& piece : fd::pieces_of_rank(buckets, r)) {
        const auto& bucket = buckets[piece.bucket];
        CHECK(piece.chunk_offset + piece.numel <= bucket.chunk());
        seen_total[piece.param] += piece.numel;
      }
    }
    for (size_t i = 0; i < params.size(); ++i) CHECK(seen_total[i] == params[i].numel());
    for (const auto& b : buckets) {
      CHECK(b.padded % world == 0);
      CHECK(b.padded - b.numel < world);
    }
  }
}

TEST_CASE("optimizer state moves between layouts: whole to 3 ranks' pieces to 2 ranks' to whole, exactly", "[memory]") {
  Seeded seeded;
  MixedNetImpl net;
  auto whole = adamw_with_groups(net);
  for (int step = 0; step < 3; ++step) {
    whole->zero_grad();
    net.loss().backward();
    whole->step();
  }
  auto reference = adamw_with_groups(net);  // the same groups, to compare state by position
  const fd::GroupSlots whole_slots = fd::whole_parameter_slots(*whole, net);
  fd::PortableOptimizerState state;
  state.add_serialized(serialized(*whole), whole_slots, "whole");

  // Each world size's pieces of the trained parameters, as OptimizerShards lays them out.
  std::vector<torch::Tensor> trained;
  std::vector<std::string> names;
  for (const auto& p : net.named_parameters()) {
    trained.push_back(p.value());
    names.push_back(p.key());
  }
  std::map<std::string, int64_t> group_of;
  for (size_t g = 0; g < whole_slots.size(); ++g) {
    for (const auto& s : whole_slots[g]) group_of[s.name] = static_cast<int64_t>(g);
  }
  auto shard_optimizers = [&](int64_t world) {
    std::vector<std::pair<std::unique_ptr<torch::optim::AdamW>, fd::GroupSlots>> ranks;
    const auto buckets = fd::bucket_layout(trained, 256, world);
    for (int64_t r = 0; r < world; ++r) {
      std::vector<ShardPieceInfo> table;
      std::vector<int64_t> next(whole_slots.size(), 0);
      std::vector<std::vector<torch::Tensor>> tensors(whole_slots.size());
      for (const auto& piece : fd::pieces_of_rank(buckets, r)) {
        const int64_t g = group_of.at(names[piece.param]);
        table.push_back({names[piece.param], piece.begin, piece.numel, g, next[static_cast<size_t>(g)]++});
        tensors[static_cast<size_t>(g)].push_back(torch::zeros({piece.numel}));
      }
      std::vector<torch::optim::OptimizerParamGroup> groups;
      for (size_t g = 0; g < whole_slots.size(); ++g) groups.emplace_back(tensors[g], whole->param_groups()[g].options().clone());
      auto optimizer = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(0.01));
      ranks.emplace_back(std::move(optimizer), fd::slots_of(table, whole_slots.size()));
    }
    return ranks;
  };
  auto three = shard_optimizers(3);
  fd::PortableOptimizerState from_three;
  for (auto& [optimizer, slots] : three) {
    state.load_into(*optimizer, slots, torch::kCPU, "three");
    CHECK(optimizer->state().size() == optimizer->param_groups()[0].params().size() + optimizer->param_groups()[1].params().size());
    from_three.add_serialized(serialized(*optimizer), slots, "three");
  }
  auto two = shard_optimizers(2);
  fd::PortableOptimizerState from_two;
  for (auto& [optimizer, slots] : two) {
    from_three.load_into(*optimizer, slots, torch::kCPU, "two");
    from_two.add_serialized(serialized(*optimizer), slots, "two");
  }
  from_two.load_into(*reference, whole_slots, torch::kCPU, "back");
  for (size_t g = 0; g < whole->param_groups().size(); ++g) {
    for (size_t j = 0; j < whole->param_groups()[g].params().size(); ++j) {
      const auto& a = static_cast<const torch::optim::AdamWParamState&>(*whole->state().at(whole->param_groups()[g].params()[j].unsafeGetTensorImpl()));
      const auto& b =
          static_cast<const torch::optim::AdamWParamState&>(*reference->state().at(reference->param_groups()[g].params()[j].unsafeGetTensorImpl()));
      CHECK(a.step() == b.step());
      CHECK(torch::equal(a.exp_avg(), b.exp_avg()));
      CHECK(torch::equal(a.exp_avg_sq(), b.exp_avg_sq()));
      CHECK(a.exp_avg().strides() == b.exp_avg().strides());
    }
  }
  CHECK(static_cast<const torch::optim::AdamWOptions&>(reference->param_groups()[0].options()).weight_decay() == 0.1);
  // A layout that does not match the checkpoint's groups is refused, naming it.
  auto single = std::make_unique<torch::optim::AdamW>(net.parameters(), torch::optim::AdamWOptions(0.01));
  CHECK_THROWS_WITH(from_two.load_into(*single, fd::whole_parameter_slots(*single, net), torch::kCPU, "ckpt-7"),
                    Catch::Contains("ckpt-7") && Catch::Contains("parameter groups"));
}

TEST_CASE("OptimizerShards: one rank's optimizer updates its pieces of the parameters in place, and what cannot be sharded is refused",
          "[memory]") {
  Seeded seeded;
  MixedNetImpl net;
  auto reference = std::make_shared<MixedNetImpl>();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net.parameters().size(); ++i) reference->parameters()[i].copy_(net.parameters()[i]);
  }
  auto optimizer = adamw_with_groups(net);
  auto plain = adamw_with_groups(*reference);
  OptimizerShards shards(1, 0, 256);
  shards.attach(net, *optimizer);
  CHECK(shards.owned_elements() == shards.total_elements());
  CHECK(shards.info()->pieces.size() == 1);
  SingleProcessCommunicator alone;
  for (int step = 0; step < 2; ++step) {
    torch::manual_seed(step);
    net.zero_grad();
    net.loss().backward();
    torch::manual_seed(step);
    reference->zero_grad();
    reference->loss().backward();
    // As the buckets would: every gradient, end to end in bucket order.
    const auto buckets = fd::bucket_layout(shards.trained(), 256, 1);
    std::vector<torch::Tensor> reduced;
    for (const auto& b : buckets) {
      torch::Tensor flat = torch::zeros({b.padded});
      for (const auto& e : b.entries) flat.narrow(0, e.offset, e.numel).copy_(shards.trained()[e.param].grad().reshape({-1}));
      reduced.push_back(flat);
    }
    shards.take_gradients(reduced, /*chunks=*/false);
    optimizer->step();
    shards.gather_parameters(alone);
    optimizer->zero_grad(/*set_to_none=*/true);  // the pieces' gradients alias the reduced buckets
    plain->step();
  }
  for (size_t i = 0; i < net.parameters().size(); ++i) CHECK(torch::allclose(net.parameters()[i], reference->parameters()[i], 1e-6, 1e-7));

  OptimizerShards twice(1, 0, 256);
  CHECK_THROWS_WITH(twice.attach(net, *optimizer), Catch::Contains("already holds state"));
  auto lbfgs = std::make_unique<torch::optim::LBFGS>(net.parameters());
  CHECK_THROWS_WITH(OptimizerShards(1, 0, 256).attach(net, *lbfgs), Catch::Contains("LBFGS"));
  auto stranger = std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{torch::zeros({3}, torch::requires_grad())},
                                                      torch::optim::SGDOptions(0.1));
  CHECK_THROWS_WITH(OptimizerShards(1, 0, 256).attach(net, *stranger), Catch::Contains("not a parameter of the model"));
  CHECK_THROWS_WITH(OptimizerShards(2, 2, 256), Catch::Contains("rank 2"));
}

TEST_CASE("memory report: views of one storage are counted once", "[memory]") {
  const torch::Tensor whole = torch::zeros({1000});
  CHECK(storage_bytes({whole, whole.narrow(0, 0, 10), whole.view({10, 100})}) == 4000);
  CHECK(storage_bytes({whole, torch::zeros({10}), torch::Tensor()}) == 4040);
}

TEST_CASE("sharded gradients over NCCL on CUDA: reduce-scatter, the sharded step and the all-gather equal unsharded training",
          "[memory][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (NCCL's reduce-scatter and all-gather of the sharded optimizer)\n";
    return;
  }
  Seeded seeded;
  World world;  // one rank with an explicit backend: a real NCCL process group, even alone
  world.master_port = 29731;
  auto nccl = connect(world, CommunicatorOptions().backend(CollectiveBackend::nccl).timeout_seconds(60));
  auto train = [&](ShardMode shard) {
    torch::manual_seed(11);
    TinyNet net(4, 64, 3);
    Trainer trainer(Model(net.ptr(), cross_entropy()),
                    [](torch::nn::Module& m) { return std::make_unique<FusedAdamW>(m.parameters(), torch::optim::AdamWOptions(0.01)); },
                    blobs(64), TrainerOptions().device("cuda").max_steps(6).run_dir(""), DataLoaderOptions().batch_size(8));
    add_data_parallel(trainer, std::make_shared<DataParallelPolicy>(nccl, DataParallelOptions().bucket_cap_mb(0.001).shard(shard)));
    trainer.add_policy(std::make_shared<GradientClippingPolicy>(GradientClippingOptions().mode(ClipMode::norm).max_norm(0.1)));
    trainer.fit();
    return flat_parameters(*net).cpu();
  };
  const torch::Tensor whole = train(ShardMode::off);
  for (const ShardMode shard : {ShardMode::optimizer, ShardMode::gradients}) {
    INFO(to_string(shard));
    CHECK(torch::allclose(train(shard), whole, 1e-5, 1e-6));
  }
}
