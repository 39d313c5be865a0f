#include <catch2/catch.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

TEST_CASE("weight_decay_groups exempts biases and norms, and SGD then leaves them undecayed", "[core]") {
  torch::nn::Sequential net(torch::nn::Linear(3, 4), torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})), torch::nn::Linear(4, 2));
  const auto options = torch::optim::SGDOptions(0.1).weight_decay(0.5);
  auto groups = weight_decay_groups(*net, options, is_bias_or_norm);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].params().size() == 2);  // the two Linear weights
  CHECK(groups[1].params().size() == 4);  // two biases, LayerNorm weight and bias
  CHECK(static_cast<const torch::optim::SGDOptions&>(groups[1].options()).weight_decay() == 0.0);
  CHECK(static_cast<const torch::optim::SGDOptions&>(groups[0].options()).weight_decay() == 0.5);
  // A step with zero gradients moves only the decayed parameters.
  torch::optim::SGD sgd(groups, options);
  const torch::Tensor bias = net[0]->as<torch::nn::Linear>()->bias.detach().clone();
  const torch::Tensor weight = net[0]->as<torch::nn::Linear>()->weight.detach().clone();
  for (auto& p : net->parameters()) p.mutable_grad() = torch::zeros_like(p);
  sgd.step();
  CHECK(torch::equal(net[0]->as<torch::nn::Linear>()->bias, bias));
  CHECK(!torch::equal(net[0]->as<torch::nn::Linear>()->weight, weight));
  // Names decide for BERT's rule; no exempt parameter means one group.
  CHECK(is_bias_or_layer_norm("bert.encoder.layer.0.output.LayerNorm.weight", torch::ones(1)));
  CHECK(!is_bias_or_layer_norm("bert.encoder.layer.0.output.dense.weight", torch::ones(1)));
  CHECK(weight_decay_groups(*net, options, [](const std::string&, const torch::Tensor&) { return false; }).size() == 1);
}
