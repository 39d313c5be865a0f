// Activation checkpointing: the building block (gradients, random and autocast state, buffers,
// hooks, errors) and the models that use it (BERT per layer / every K / attention core, ResNet per
// block / every K / stage): checkpointed training computes bitwise what plain training computes on
// the CPU, and holds less memory.
#include <catch2/catch.hpp>

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <iostream>
#include <optional>

#include "distributed/gradient_buckets.hpp"
#include "support/fixtures.hpp"
#include "tooling/detail/cpu_memory_meter.hpp"

using namespace frugal;
using namespace frugal::testing;
using torch::autograd::variable_list;

namespace {

struct Gradients {
  torch::Tensor loss;
  std::vector<torch::Tensor> grads;
};

Gradients gradients_of(torch::nn::Module& module, const std::function<torch::Tensor()>& loss_fn) {
  module.zero_grad(/*set_to_none=*/true);
  Gradients out;
  out.loss = loss_fn();
  out.loss.backward();
  for (const auto& p : module.parameters()) out.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return out;
}

bool bitwise_equal(const Gradients& a, const Gradients& b) {
  if (!torch::equal(a.loss, b.loss) || a.grads.size() != b.grads.size()) return false;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (a.grads[i].defined() != b.grads[i].defined()) return false;
    if (a.grads[i].defined() && !torch::equal(a.grads[i], b.grads[i])) return false;
  }
  return true;
}

struct DropoutMlpImpl : torch::nn::Module {
  DropoutMlpImpl() {
    for (int i = 0; i < 3; ++i) layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(16, 16)));
  }
  torch::Tensor layer(size_t i, const torch::Tensor& x) { return torch::dropout(torch::tanh(layers[i]->forward(x)), 0.3, is_training()); }
  std::vector<torch::nn::Linear> layers;
};

BertForQuestionAnswering tiny_bert(uint64_t seed, int64_t layers = 4) {
  torch::manual_seed(seed);
  BertConfig c = BertConfig::preset("tiny");
  c.vocab_size = 60;
  c.num_hidden_layers = layers;
  c.hidden_dropout_prob = 0.1;  // the masks must come out the same when recomputed
  c.attention_probs_dropout_prob = 0.1;
  return BertForQuestionAnswering(c);
}

torch::Tensor bert_loss(BertForQuestionAnswering& net, const torch::Tensor& ids, const torch::Tensor& mask) {
  auto [start, end] = net->forward(ids, torch::zeros_like(ids), mask);
  return question_answering_loss(start, end, torch::tensor({3, 5, 1, 2}), torch::tensor({4, 9, 2, 3}));
}

ResNet small_resnet(uint64_t seed) {
  torch::manual_seed(seed);
  return ResNet(ResNetOptions::variant("resnet26").base_channels(4).num_classes(5));
}

}  // namespace

TEST_CASE("activation checkpointing: plans parse, and bad ones are named", "[memory]") {
  CHECK(ActivationCheckpointing::parse("off").scope == CheckpointScope::off);
  CHECK(ActivationCheckpointing::parse("full").scope == CheckpointScope::full);
  const auto every = ActivationCheckpointing::parse("every:3");
  CHECK(every.scope == CheckpointScope::every);
  CHECK(every.to_string() == "every:3");
  CHECK(every.covers_layer(0));
  CHECK_FALSE(every.covers_layer(1));
  CHECK(every.covers_layer(6));
  CHECK(ActivationCheckpointing::parse("attention").to_string() == "attention");
  CHECK_THROWS_WITH(ActivationCheckpointing::parse("every:0", "model.activation_checkpointing"),
                    Catch::Contains("model.activation_checkpointing") && Catch::Contains("every:0"));
  CHECK_THROWS_WITH(ActivationCheckpointing::parse("every:2x"), Catch::Contains("whole number"));
  CHECK_THROWS_WITH(ActivationCheckpointing::parse("sometimes"), Catch::Contains("off, full, every:K, attention or stage"));
  BertForQuestionAnswering bert = tiny_bert(1);
  CHECK_THROWS_WITH(bert->bert->encoder->set_activation_checkpointing(ActivationCheckpointing::parse("stage")),
                    Catch::Contains("stage is ResNet's"));
  ResNet resnet = small_resnet(1);
  CHECK_THROWS_WITH(resnet->set_activation_checkpointing(ActivationCheckpointing::parse("attention")),
                    Catch::Contains("attention is BERT's"));
}

TEST_CASE("activation checkpointing: same gradients with dropout, the random state restored and continued", "[memory]") {
  Seeded seeded;
  DropoutMlpImpl net;
  net.train();
  const torch::Tensor x = torch::randn({8, 16}, torch::requires_grad());
  auto run = [&](bool checkpointed, ActivationCheckpointOptions options) {
    torch::manual_seed(42);
    Gradients g = gradients_of(net, [&] {
      torch::Tensor h = x;
      for (size_t i = 0; i < net.layers.size(); ++i) {
        if (!checkpointed) {
          h = net.layer(i, h);
          continue;
        }
        h = activation_checkpoint([&net, i](const variable_list& in) { return variable_list{net.layer(i, in[0])}; }, {h},
                                  net.layers[i]->parameters(), {}, options)[0];
      }
      return h.pow(2).sum();
    });
    // What the run draws next: the same as without checkpointing (the recomputation put the state back).
    return std::make_pair(g, torch::rand({4}));
  };
  const auto plain = run(false, {});
  const auto checkpointed = run(true, {});
  CHECK(bitwise_equal(plain.first, checkpointed.first));
  CHECK(torch::equal(plain.second, checkpointed.second));
  // The test can fail: recomputing without restoring the random state draws other masks.
  const auto unrestored = run(true, ActivationCheckpointOptions().preserve_rng_state(false));
  CHECK_FALSE(bitwise_equal(plain.first, unrestored.first));
  // Offload is accepted on the CPU and changes nothing there.
  CHECK(bitwise_equal(plain.first, run(true, ActivationCheckpointOptions().offload(true)).first));
}

TEST_CASE("activation checkpointing: the recomputation runs under the forward's autocast, and leaves no stale weight casts", "[memory]") {
  Seeded seeded;
  torch::nn::Linear layer(32, 32);
  const torch::Tensor x = torch::randn({4, 32}, torch::requires_grad());
  auto run = [&](bool checkpointed) {
    Gradients g = gradients_of(*layer, [&] {
      AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
      torch::Tensor y = checkpointed ? activation_checkpoint(*layer, [&](const torch::Tensor& in) { return layer->forward(in).relu(); }, x)
                                     : layer->forward(x).relu();
      return y.to(torch::kFloat).pow(2).sum();
    });
    return g;
  };
  const Gradients plain = run(false), checkpointed = run(true);
  CHECK(plain.grads[0].scalar_type() == torch::kFloat);
  CHECK(bitwise_equal(plain, checkpointed));
  // Backward ran outside the autocast region: had the recomputation cached bf16 casts of the
  // weights, a later forward would use them after the weights changed.
  {
    torch::NoGradGuard no_grad;
    layer->weight.add_(1.0);
  }
  const torch::Tensor fresh = [&] {
    AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
    return layer->forward(x.detach());
  }();
  const torch::Tensor expected = torch::linear(x.detach().to(torch::kBFloat16), layer->weight.to(torch::kBFloat16), layer->bias.to(torch::kBFloat16));
  CHECK(torch::equal(fresh, expected));
}

TEST_CASE("activation checkpointing: gradient accumulator hooks fire once per backward, and an unlisted parameter is an error",
          "[memory]") {
  Seeded seeded;
  DropoutMlpImpl net;
  net.eval();
  std::vector<int> fired(net.parameters().size(), 0);
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;
  const auto params = net.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    hooks.emplace_back(accumulator, accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
                                        [&fired, i](const variable_list& outputs, const variable_list&) {
                                          ++fired[i];
                                          return outputs;
                                        })));
  }
  torch::Tensor h = torch::randn({4, 16});
  for (size_t i = 0; i < net.layers.size(); ++i) {
    h = activation_checkpoint([&net, i](const variable_list& in) { return variable_list{net.layer(i, in[0])}; }, {h},
                              net.layers[i]->parameters())[0];
  }
  h.sum().backward();
  for (size_t i = 0; i < fired.size(); ++i) CHECK(fired[i] == 1);
  for (auto& [accumulator, key] : hooks) accumulator->del_post_hook(key);

  // A layer used by two segments: its accumulator runs once per segment. Reduced after backward
  // (no overlap) the parts add up; overlapped, the second part comes after the bucket was sent: an
  // error that says so, not a silently wrong gradient.
  {
    SingleProcessCommunicator alone;
    const auto shared = net.layers[0]->parameters();
    const torch::Tensor x = torch::randn({4, 16});
    auto twice = [&](bool checkpointed, bool overlap) {
      frugal::detail::GradientBuckets buckets(shared, 1 << 20, alone, overlap, frugal::detail::BucketReduction::scattered);
      for (auto& p : shared) p.mutable_grad().reset();
      buckets.arm();
      torch::Tensor h = x;
      for (int k = 0; k < 2; ++k) {
        h = checkpointed ? activation_checkpoint([&net](const variable_list& in) { return variable_list{net.layer(0, in[0])}; }, {h}, shared)[0]
                         : net.layer(0, h);
      }
      h.sum().backward();
      buckets.finish();
      return buckets.reduced(0).clone();
    };
    CHECK(torch::allclose(twice(true, false), twice(false, true), 1e-6, 1e-7));
    CHECK_THROWS_WITH(twice(true, true), Catch::Contains("several activation-checkpointed segments"));
  }
  // The segment reads layer 1's weights but lists layer 0's: its gradients would be lost.
  torch::Tensor y = activation_checkpoint([&net](const variable_list& in) { return variable_list{net.layer(1, in[0])}; },
                                          {torch::randn({4, 16})}, net.layers[0]->parameters())[0];
  CHECK_THROWS_WITH(y.sum().backward(), Catch::Contains("neither an input nor one of the segment's parameters"));
}

TEST_CASE("activation checkpointing in BERT: full, every:2 and attention compute bitwise the plain gradients, with dropout, "
          "under bf16 autocast and over accumulated micro-batches",
          "[memory][bert]") {
  Seeded seeded;
  const torch::Tensor ids = torch::randint(1, 60, {4, 24});
  torch::Tensor mask = torch::ones_like(ids);
  mask.select(0, 2).narrow(0, 17, 7).zero_();
  for (const bool unpad : {false, true}) {
    for (const bool bf16 : {false, true}) {
      auto run = [&](const std::string& plan) {
        BertForQuestionAnswering net = tiny_bert(7);
        net->bert->set_unpad(unpad);
        net->bert->encoder->set_activation_checkpointing(ActivationCheckpointing::parse(plan));
        net->train();
        torch::manual_seed(99);
        // Two micro-batches into one set of gradients, as gradient accumulation does: the first
        // backward here, the second by gradients_of. Backward runs outside autocast, as in the Trainer.
        auto micro_loss = [&] {
          std::optional<AutocastGuard> autocast;
          if (bf16) autocast.emplace(torch::kCPU, torch::kBFloat16);
          return bert_loss(net, ids, mask) / 2;
        };
        return gradients_of(*net, [&] {
          micro_loss().backward();
          return micro_loss();
        });
      };
      const Gradients plain = run("off");
      for (const std::string plan : {"full", "every:2", "attention"}) {
        INFO("unpad " << unpad << ", bf16 " << bf16 << ", " << plan);
        CHECK(bitwise_equal(plain, run(plan)));
      }
    }
  }
}

TEST_CASE("activation checkpointing in ResNet: per block, every:2 and per stage give bitwise the plain gradients and "
          "BatchNorm statistics (updated once)",
          "[memory][resnet]") {
  Seeded seeded;
  const torch::Tensor images = torch::randn({4, 3, 40, 40});
  const torch::Tensor labels = torch::tensor({0, 3, 1, 4});
  for (const bool channels_last : {false, true}) {
    auto run = [&](const std::string& plan) {
      ResNet net = small_resnet(3);
      if (channels_last) to_memory_format(*net, torch::MemoryFormat::ChannelsLast);
      net->set_activation_checkpointing(ActivationCheckpointing::parse(plan));
      net->train();
      const torch::Tensor x = channels_last ? images.contiguous(torch::MemoryFormat::ChannelsLast) : images;
      Gradients g = gradients_of(*net, [&] { return torch::cross_entropy_loss(net->forward(x), labels); });
      std::vector<torch::Tensor> stats;
      for (const auto& b : net->buffers()) stats.push_back(b.clone());
      return std::make_pair(g, stats);
    };
    const auto plain = run("off");
    for (const std::string plan : {"full", "every:2", "stage"}) {
      INFO("channels_last " << channels_last << ", " << plan);
      const auto checkpointed = run(plan);
      CHECK(bitwise_equal(plain.first, checkpointed.first));
      REQUIRE(plain.second.size() == checkpointed.second.size());
      bool same_stats = true;
      for (size_t i = 0; i < plain.second.size(); ++i) same_stats = same_stats && torch::equal(plain.second[i], checkpointed.second[i]);
      CHECK(same_stats);
    }
  }
}

TEST_CASE("activation checkpointing: BERT's activation memory falls, measured", "[memory][bert]") {
  Seeded seeded;
  const torch::Tensor ids = torch::randint(1, 60, {4, 128});
  const torch::Tensor mask = torch::ones_like(ids);
  auto activation_bytes = [&](const std::string& plan) {
    BertForQuestionAnswering net = tiny_bert(5, 6);
    net->bert->encoder->set_activation_checkpointing(ActivationCheckpointing::parse(plan));
    net->train();
    frugal::detail::CpuMemoryMeter meter;  // counts what the step allocates: the weights were made before
    bert_loss(net, ids, mask).backward();
    return meter.peak_bytes();
  };
  const double plain = static_cast<double>(activation_bytes("off"));
  const double full = static_cast<double>(activation_bytes("full"));
  const double attention = static_cast<double>(activation_bytes("attention"));
  std::cout << "activation peak: plain " << plain / 1e6 << " MB, full " << full / 1e6 << " MB (" << full / plain
            << "x), attention " << attention / 1e6 << " MB (" << attention / plain << "x)\n";
  CHECK(full < 0.5 * plain);
  CHECK(attention < plain);
  CHECK(full < attention);
}

TEST_CASE("activation checkpointing on CUDA: the CUDA random state restored, offload to pinned memory", "[memory][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (CUDA dropout masks, offload to pinned host memory)\n";
    return;
  }
  Seeded seeded;
  const torch::Tensor ids = torch::randint(1, 60, {4, 24}).cuda();
  const torch::Tensor mask = torch::ones_like(ids);
  auto run = [&](const std::string& plan, bool offload) {
    BertForQuestionAnswering net = tiny_bert(7);
    net->to(torch::kCUDA);
    ActivationCheckpointing p = ActivationCheckpointing::parse(plan);
    p.offload = offload;
    net->bert->encoder->set_activation_checkpointing(p);
    net->train();
    torch::manual_seed(99);
    return gradients_of(*net, [&] {
      auto [start, end] = net->forward(ids, torch::zeros_like(ids), mask);
      return question_answering_loss(start, end, torch::tensor({3, 5, 1, 2}).cuda(), torch::tensor({4, 9, 2, 3}).cuda());
    });
  };
  const Gradients plain = run("off", false);
  for (const bool offload : {false, true}) {
    INFO("offload " << offload);
    CHECK(bitwise_equal(plain, run("full", offload)));
  }
}
