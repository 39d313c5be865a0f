// What enters an optimizer later than its constructor: a parameter group added with
// add_param_group, a checkpoint's group options and states, a parameter whose layout differs from
// its gradient's. Each is honoured or refused by name, never silently ignored.
#include <catch2/catch.hpp>

#include <sstream>

#include "optim/optimizer_archive.hpp"
#include "optim/optimizer_loading.hpp"
#include "optim/quantized_param_state.hpp"
#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

torch::serialize::InputArchive archive_of(const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  return archive;
}

}  // namespace

TEST_CASE("amsgrad is refused with 8-bit states wherever it enters: construction, add_param_group, a loaded state, a step", "[optim]") {
  Seeded seeded;
  auto a = torch::randn({5000}, torch::requires_grad());
  auto b = torch::randn({5000}, torch::requires_grad());
  const auto eight = StateQuantization().bits(8);
  FusedAdamW adamw(std::vector<torch::Tensor>{a}, torch::optim::AdamWOptions(1e-3), eight);
  const auto amsgrad_group = [&] {
    return torch::optim::OptimizerParamGroup({b}, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3).amsgrad(true)));
  };
  CHECK_THROWS_WITH(adamw.add_param_group(amsgrad_group()), Catch::Contains("amsgrad") && Catch::Contains("add_param_group"));
  CHECK(adamw.param_groups().size() == 1);  // left as it was
  FusedAdam adam(std::vector<torch::Tensor>{a}, torch::optim::AdamOptions(1e-3), eight);
  CHECK_THROWS_WITH(adam.add_param_group(torch::optim::OptimizerParamGroup(
                        {b}, std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(1e-3).amsgrad(true)))),
                    Catch::Contains("amsgrad"));
  // Through the base class, which cannot be intercepted: the step refuses before changing anything.
  static_cast<torch::optim::Optimizer&>(adamw).add_param_group(amsgrad_group());
  a.mutable_grad() = torch::ones_like(a);
  b.mutable_grad() = torch::ones_like(b);
  const auto before = a.detach().clone();
  CHECK_THROWS_WITH(adamw.step(), Catch::Contains("amsgrad"));
  CHECK(torch::equal(a, before));
  // A checkpoint of an fp32 AdamW with amsgrad, loaded into one with 8-bit states.
  FusedAdamW with_amsgrad(std::vector<torch::Tensor>{a}, torch::optim::AdamWOptions(1e-3).amsgrad(true));
  with_amsgrad.step();
  FusedAdamW eight_bit(std::vector<torch::Tensor>{a}, torch::optim::AdamWOptions(1e-3), eight);
  auto archive = archive_of(frugal::detail::optimizer_archive_bytes(with_amsgrad));
  CHECK_THROWS_WITH(eight_bit.load(archive), Catch::Contains("amsgrad") && Catch::Contains("loaded"));
}

TEST_CASE("fused fp32 AdamW and Adam follow torch::optim's on a parameter laid out unlike its gradient", "[optim]") {
  Seeded seeded;
  // A transposed weight (dense, not contiguous) whose gradient is contiguous; a channels-last
  // weight with a contiguous gradient; and a non-dense view. ATen's fused kernel alone updates
  // the transposed one with the wrong elements' gradients (pytorch/pytorch#106951).
  const auto transposed = torch::randn({48, 32}).t();
  const auto channels_last = torch::randn({4, 3, 5, 5}).contiguous(torch::MemoryFormat::ChannelsLast);
  const auto strided = torch::randn({64, 20}).slice(1, 0, 20, 2);
  for (const auto& start : {transposed, channels_last, strided}) {
    INFO("parameter of shape " << start.sizes() << " and strides " << start.strides());
    std::vector<torch::Tensor> grads;
    for (int i = 0; i < 50; ++i) grads.push_back(torch::randn(start.sizes()));  // contiguous
    auto reference = [&](auto make) {
      auto p = start.clone(torch::MemoryFormat::Preserve).requires_grad_(true);
      auto opt = make(p);
      for (const auto& g : grads) {
        p.mutable_grad() = g.clone();
        opt->step();
      }
      return p.detach().contiguous();
    };
    const auto w = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
    const auto ours_w = reference([&](torch::Tensor& p) { return std::make_unique<FusedAdamW>(std::vector<torch::Tensor>{p}, w); });
    const auto theirs_w = reference([&](torch::Tensor& p) { return std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{p}, w); });
    CHECK(((ours_w - theirs_w).abs().max() / theirs_w.abs().max()).item<double>() < 1e-5);
    const auto a = torch::optim::AdamOptions(1e-2).weight_decay(0.1);
    const auto ours_a = reference([&](torch::Tensor& p) { return std::make_unique<FusedAdam>(std::vector<torch::Tensor>{p}, a); });
    const auto theirs_a = reference([&](torch::Tensor& p) { return std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{p}, a); });
    CHECK(((ours_a - theirs_a).abs().max() / theirs_a.abs().max()).item<double>() < 1e-5);
  }
}

TEST_CASE("an 8-bit checkpoint loads into LibTorch's own AdamW and SGD as fp32 moments, and is refused by an optimizer that cannot take it",
          "[optim][checkpoint]") {
  Seeded seeded;
  TinyNet net(64, 96, 3);  // fc1.weight 6144 elements: 8-bit
  const auto o = torch::optim::AdamWOptions(1e-3).weight_decay(0.01);
  FusedAdamW eight(net->parameters(), o, StateQuantization().bits(8));
  for (int s = 0; s < 3; ++s) {
    for (auto& p : net->parameters()) p.mutable_grad() = torch::randn_like(p);
    eight.step();
  }
  const std::string bytes = frugal::detail::optimizer_archive_bytes(eight);
  const auto& q = dynamic_cast<const QuantizedParamState&>(*eight.state().at(net->fc1->weight.unsafeGetTensorImpl()));

  torch::optim::AdamW plain(net->parameters(), o);
  frugal::detail::load_optimizer_state(plain, *net, bytes, torch::kCPU);
  const auto& fp32 = dynamic_cast<const torch::optim::AdamWParamState&>(*plain.state().at(net->fc1->weight.unsafeGetTensorImpl()));
  CHECK(fp32.step() == 3);
  CHECK(torch::equal(fp32.exp_avg().reshape({-1}), frugal::detail::dequantize_blockwise(q.moment(0), true)));
  CHECK(torch::equal(fp32.exp_avg_sq().reshape({-1}), frugal::detail::dequantize_blockwise(q.moment(1), false)));
  for (auto& p : net->parameters()) p.mutable_grad() = torch::randn_like(p);
  plain.step();  // was: "Expected a proper Tensor but got None" at this step
  for (const auto& p : net->parameters()) CHECK(p.isfinite().all().item<bool>());

  // An optimizer of another kind whose state layout Frugal cannot know: refused, naming it.
  struct Custom : torch::optim::Optimizer {
    explicit Custom(std::vector<torch::Tensor> ps) : Optimizer({torch::optim::OptimizerParamGroup(std::move(ps))}, std::make_unique<torch::optim::SGDOptions>(0.1)) {}
    torch::Tensor step(LossClosure) override { return {}; }
  } custom(net->parameters());
  CHECK_THROWS_WITH(frugal::detail::load_optimizer_state(custom, *net, bytes, torch::kCPU),
                    Catch::Contains("8-bit optimizer states") && Catch::Contains("Custom") && Catch::Contains("optimizer.fused"));
}

TEST_CASE("a run with torch::optim::AdamW resumes a checkpoint written with 8-bit states and trains on", "[optim][checkpoint]") {
  Seeded seeded;
  const auto dir = scratch_dir("plain_adamw_resumes_8bit");
  auto fit = [&](int64_t steps, OptimizerFactory factory) {
    TinyNet net(4, 1024, 3);  // fc1.weight 4096 elements: 8-bit
    Trainer trainer(Model(net.ptr(), cross_entropy()), std::move(factory), blobs(64),
                    TrainerOptions().device("cpu").run_dir(dir.string()).max_steps(steps), DataLoaderOptions().batch_size(8));
    add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(2).async(false)));
    const FitResult result = trainer.fit();
    return std::make_pair(result, flat_parameters(*net));
  };
  fit(4, [](torch::nn::Module& m) {
    return std::make_unique<FusedAdamW>(m.parameters(), torch::optim::AdamWOptions(1e-2), StateQuantization().bits(8));
  });
  const auto [result, params] = fit(8, [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(1e-2));
  });
  CHECK(result.state.step == 8);
  CHECK(params.isfinite().all().item<bool>());
}
