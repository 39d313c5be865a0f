// FusedAdamW against torch::optim::AdamW: the same updates to rounding, the same state, and
// checkpoints that move between the two.
#include <catch2/catch.hpp>

#include <sstream>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

std::vector<torch::optim::OptimizerParamGroup> groups(TinyNetImpl& net, const torch::optim::AdamWOptions& o) {
  return weight_decay_groups(net, o, is_bias_or_norm);
}

// Runs `steps` steps of `optimizer` on `net` with gradients fixed by the step number.
void train(TinyNetImpl& net, torch::optim::Optimizer& optimizer, int steps, int first = 0) {
  for (int i = first; i < first + steps; ++i) {
    torch::manual_seed(static_cast<uint64_t>(100 + i));
    optimizer.zero_grad();
    const auto b = blobs(32, static_cast<uint64_t>(i));
    torch::cross_entropy_loss(net.forward(b->get_batch({0, 1, 2, 3, 4, 5, 6, 7}).input), b->get_batch({0, 1, 2, 3, 4, 5, 6, 7}).target)
        .backward();
    if (i % 3 == 2) net.fc1->bias.mutable_grad() = torch::Tensor();  // a parameter without gradient is left alone
    optimizer.step();
  }
}

}  // namespace

TEST_CASE("FusedAdamW matches torch::optim::AdamW, with and without amsgrad", "[optim]") {
  for (bool amsgrad : {false, true}) {
    Seeded seeded;
    TinyNet fused_net, plain_net;
    frugal::detail::copy_state(*fused_net, *plain_net, torch::kCPU);
    const auto o = torch::optim::AdamWOptions(1e-2).weight_decay(0.1).eps(1e-6).amsgrad(amsgrad);
    FusedAdamW fused(groups(*fused_net, o), o);
    torch::optim::AdamW plain(groups(*plain_net, o), o);
    train(*fused_net, fused, 7);
    train(*plain_net, plain, 7);
    INFO("amsgrad " << amsgrad);
    CHECK(torch::allclose(flat_parameters(*fused_net), flat_parameters(*plain_net), 1e-5, 1e-7));
    for (const auto& p : fused_net->parameters()) {
      const auto& s = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(p.unsafeGetTensorImpl()));
      CHECK(s.step() == (p.is_same(fused_net->fc1->bias) ? 5 : 7));
    }
  }
}

TEST_CASE("FusedAdamW state is AdamW's: a checkpoint of one continues in the other", "[optim]") {
  Seeded seeded;
  TinyNet a, b;
  frugal::detail::copy_state(*a, *b, torch::kCPU);
  const auto o = torch::optim::AdamWOptions(5e-3).weight_decay(0.01);
  FusedAdamW fused(groups(*a, o), o);
  train(*a, fused, 4);
  std::stringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    fused.save(archive);
    archive.save_to(bytes);
  }
  frugal::detail::copy_state(*a, *b, torch::kCPU);
  torch::optim::AdamW plain(groups(*b, o), o);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  plain.load(in);
  train(*a, fused, 3, 4);
  train(*b, plain, 3, 4);
  CHECK(torch::allclose(flat_parameters(*a), flat_parameters(*b), 1e-5, 1e-7));
}
