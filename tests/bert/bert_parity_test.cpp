#include <catch2/catch.hpp>

#include <fstream>
#include <iostream>
#include <optional>

#include "frugal/errors.hpp"
#include "frugal/io/safetensors.hpp"
#include "frugal/models/bert.hpp"
#include "models/detail/flash_varlen_attention.hpp"
#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max() / b.to(torch::kFloat64).abs().max().clamp_min(1e-12))
      .item<double>();
}

// A tiny BERT (vocabulary 60) without hidden dropout.
BertForQuestionAnswering tiny_bert(double attention_dropout) {
  BertConfig c = BertConfig::preset("tiny");
  c.vocab_size = 60;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = attention_dropout;
  return BertForQuestionAnswering(c);
}

struct PaddedBatch {
  torch::Tensor ids, types, mask;
};

// Random token ids, each row padded (id 0, mask 0) after its length.
PaddedBatch padded_batch(const std::vector<int64_t>& lengths, int64_t seq) {
  const torch::Tensor mask = torch::arange(seq).unsqueeze(0).lt(torch::tensor(lengths).unsqueeze(1)).to(torch::kLong);
  const torch::Tensor ids = torch::randint(1, 60, {static_cast<int64_t>(lengths.size()), seq}) * mask;
  return {ids, torch::zeros_like(ids), mask};
}

}  // namespace

TEST_CASE("BERT QA matches Hugging Face transformers: names, eval logits, train loss and gradients, encoder-only checkpoints",
          "[python]") {
  Seeded seeded;
  const fs::path dir = scratch_dir("bert_parity");
  const auto json = run_python_reference("hf_bert_qa.py", "make " + dir.string());
  const auto ref = read_safetensors(dir / "reference.safetensors");
  BertForQuestionAnswering net = load_bert_for_qa(dir / "qa");
  const torch::Tensor& ids = ref.at("input_ids");
  const torch::Tensor& types = ref.at("token_type_ids");
  const torch::Tensor& mask = ref.at("attention_mask");

  net->eval();
  {
    torch::NoGradGuard no_grad;
    auto [start, end] = net->forward(ids, types, mask);
    CHECK(relative_difference(start, ref.at("start_logits")) < 1e-5);
    CHECK(relative_difference(end, ref.at("end_logits")) < 1e-5);
  }
  // Train mode in float64 (as the ResNet parity test, for exact agreement).
  net->to(torch::kFloat64);
  net->train();
  auto [start, end] = net->forward(ids, types, mask);
  REQUIRE(start.scalar_type() == torch::kFloat64);
  const torch::Tensor loss = question_answering_loss(start, end, ref.at("start_positions"), ref.at("end_positions"));
  CHECK(relative_difference(loss.reshape({1}), ref.at("loss")) < 1e-10);
  loss.backward();
  const auto params = net->named_parameters();
  for (const auto& name : json["grads"].get<std::vector<std::string>>()) {
    INFO(name);
    REQUIRE(params.contains(name));
    CHECK(relative_difference(params[name].grad(), ref.at("grad." + name)) < 1e-8);
  }

  SECTION("unpadded: the real tokens' logits, and the loss and gradients with padding taking no probability") {
    BertForQuestionAnswering unpadded = load_bert_for_qa(dir / "qa");
    unpadded->bert->set_unpad(true);
    unpadded->eval();
    {
      torch::NoGradGuard no_grad;
      auto [start, end] = unpadded->forward(ids, types, mask);
      const torch::Tensor real = mask.to(torch::kBool);
      CHECK(relative_difference(start.masked_select(real), ref.at("start_logits").masked_select(real)) < 1e-5);
      CHECK(relative_difference(end.masked_select(real), ref.at("end_logits").masked_select(real)) < 1e-5);
      CHECK(torch::isneginf(start.masked_select(real.logical_not())).all().item<bool>());
      // Hugging Face's logits at padding are finite: unpadding is opt-in.
      CHECK(torch::isfinite(ref.at("start_logits")).all().item<bool>());
    }
    unpadded->to(torch::kFloat64);
    unpadded->train();
    auto [s, e] = unpadded->forward(ids, types, mask);
    const torch::Tensor masked_loss = question_answering_loss(s, e, ref.at("start_positions"), ref.at("end_positions"));
    CHECK(relative_difference(masked_loss.reshape({1}), ref.at("masked_loss")) < 1e-10);
    CHECK(relative_difference(masked_loss.reshape({1}), ref.at("loss")) > 1e-6);  // the padded positions' share is gone
    masked_loss.backward();
    const auto unpadded_params = unpadded->named_parameters();
    for (const auto& name : json["grads"].get<std::vector<std::string>>()) {
      INFO(name);
      CHECK(relative_difference(unpadded_params[name].grad(), ref.at("masked_grad." + name)) < 1e-8);
    }
  }

  // An encoder-only checkpoint (BertModel: no "bert." prefix, no QA head) loads the same encoder.
  BertForQuestionAnswering encoder_only = load_bert_for_qa(dir / "encoder");
  BertForQuestionAnswering full = load_bert_for_qa(dir / "qa");
  const auto a = encoder_only->bert->named_parameters(), b = full->bert->named_parameters();
  for (const auto& item : b) CHECK(torch::equal(a[item.key()], item.value()));
  CHECK(encoder_only->qa_outputs->bias.abs().sum().item<double>() == 0.0);  // initialised: zero bias
}

TEST_CASE("BERT configs: presets, config.json errors name the file and key, FLOPs", "[bert]") {
  const fs::path dir = scratch_dir("bert_config");
  CHECK(BertConfig::preset("large").num_hidden_layers == 24);
  CHECK_THROWS_AS(BertConfig::preset("huge"), OptionError);
  std::ofstream(dir / "bad.json") << R"({"hidden_size": 30, "num_attention_heads": 4})";
  CHECK_THROWS_WITH(BertConfig::from_json_file(dir / "bad.json"), Catch::Contains("bad.json") && Catch::Contains("$.num_attention_heads"));
  std::ofstream(dir / "type.json") << R"({"hidden_size": "big"})";
  CHECK_THROWS_WITH(BertConfig::from_json_file(dir / "type.json"), Catch::Contains("$.hidden_size: expected an integer"));
  std::ofstream(dir / "syntax.json") << R"({"hidden_size": )";
  CHECK_THROWS_WITH(BertConfig::from_json_file(dir / "syntax.json"), Catch::Contains("not valid JSON"));
  // BERT-large at 384 tokens: ~2 x 0.33 G params x 384 tokens plus attention, about 250 GFLOPs.
  const double flops = BertConfig::preset("large").forward_flops(384);
  CHECK(flops > 2.3e11);
  CHECK(flops < 2.8e11);
  // A wrong shape in the checkpoint names the tensor.
  BertConfig tiny = BertConfig::preset("tiny");
  tiny.vocab_size = 50;
  BertForQuestionAnswering net(tiny);
  fs::create_directories(dir / "model");
  save_safetensors(*net, dir / "model" / "model.safetensors");
  std::ofstream(dir / "model" / "config.json") << R"({"vocab_size": 60, "hidden_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 2, "intermediate_size": 512})";
  CHECK_THROWS_WITH(load_bert_for_qa(dir / "model"), Catch::Contains("bert.embeddings.word_embeddings.weight"));
  // The round trip through Frugal's own export.
  std::ofstream(dir / "model" / "config.json", std::ios::trunc) << R"({"vocab_size": 50, "hidden_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 2, "intermediate_size": 512})";
  BertForQuestionAnswering back = load_bert_for_qa(dir / "model");
  CHECK(torch::equal(back->qa_outputs->weight, net->qa_outputs->weight));
  auto copy = std::dynamic_pointer_cast<BertForQuestionAnsweringImpl>(net->clone());
  REQUIRE(copy);
  copy->qa_outputs->weight.data().fill_(3.0);
  CHECK(net->qa_outputs->weight.ne(3.0).all().item<bool>());
}

TEST_CASE("BERT training on the CPU: the attention with dropout and the dropout masks", "[bert]") {
  Seeded seeded;
  BertConfig c = BertConfig::preset("tiny");
  c.vocab_size = 60;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 1e-12;  // the training path (dropout on), yet nothing dropped
  BertForQuestionAnswering net(c);
  const torch::Tensor ids = torch::randint(1, 60, {3, 20});
  const torch::Tensor types = torch::zeros_like(ids);
  torch::Tensor mask = torch::ones_like(ids);
  mask.narrow(1, 14, 6).select(0, 1).zero_();  // padding in the second sequence
  net->train();
  const auto [train_start, train_end] = net->forward(ids, types, mask);
  net->eval();  // scaled_dot_product_attention, no dropout
  const auto [eval_start, eval_end] = net->forward(ids, types, mask);
  CHECK(torch::allclose(train_start, eval_start, 1e-5, 1e-6));
  CHECK(torch::allclose(train_end, eval_end, 1e-5, 1e-6));
  // With real dropout, training outputs differ from evaluation, and each mask keeps about 1 - p.
  c.attention_probs_dropout_prob = 0.3;
  c.hidden_dropout_prob = 0.3;
  BertForQuestionAnswering dropped(c);
  dropped->train();
  const auto [a, b] = dropped->forward(ids, types, mask);
  dropped->eval();
  const auto [e, f] = dropped->forward(ids, types, mask);
  CHECK_FALSE(torch::allclose(a, e, 1e-3, 1e-3));
  dropped->train();  // the share the embeddings' dropout keeps
  const torch::Tensor emb = dropped->bert->embeddings->forward(torch::randint(1, 60, {64, 128}), torch::zeros({64, 128}, torch::kLong));
  const double kept = emb.ne(0).to(torch::kDouble).mean().item<double>();
  CHECK(kept == Approx(0.7).margin(0.01));
}

TEST_CASE("BERT unpadded: training on the real tokens only computes what the padded model computes there", "[bert]") {
  Seeded seeded;
  BertForQuestionAnswering net = tiny_bert(1e-12);  // the CPU training attention, yet nothing dropped
  auto [ids, types, mask] = padded_batch({20, 14, 3}, 20);
  const torch::Tensor real = mask.to(torch::kBool);
  net->eval();
  const auto [padded_start, padded_end] = net->forward(ids, types, mask);
  net->bert->set_unpad(true);
  for (const bool training : {true, false}) {  // the packed CPU attention, and the masked one around the padded batch
    INFO("training " << training);
    net->train(training);
    const auto [start, end] = net->forward(ids, types, mask);
    CHECK(torch::allclose(start.masked_select(real), padded_start.masked_select(real), 1e-5, 1e-6));
    CHECK(torch::allclose(end.masked_select(real), padded_end.masked_select(real), 1e-5, 1e-6));
    CHECK(torch::isneginf(start.masked_select(real.logical_not())).all().item<bool>());
    const torch::Tensor hidden = net->bert->forward(ids, types, mask);
    CHECK(hidden.select(0, 2).narrow(0, 3, 17).abs().sum().item<double>() == 0.0);  // zero rows at padding
  }
  net->train();  // gradients flow to every layer, through the packed attention
  auto [start, end] = net->forward(ids, types, mask);
  question_answering_loss(start, end, torch::tensor({3, 5, 1}), torch::tensor({4, 9, 2})).backward();
  for (const auto& p : net->parameters()) CHECK(p.grad().defined());
  CHECK(net->bert->encoder->named_parameters()["layer.0.attention.self.key.weight"].grad().abs().sum().item<double>() > 0);
  // A row without a real token has no answer to give: an error, not a NaN loss.
  mask.select(0, 0).zero_();
  CHECK_THROWS_WITH(net->forward(ids, types, mask), Catch::Contains("attention_mask row 0 has no real token"));
}

TEST_CASE("BERT on CUDA: SDPA's kernels equal the CPU, and unpadded equals padded at the real tokens, fp32 and bf16", "[bert][gpu]") {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device on this machine (the GPU attention kernels)\n";
    return;
  }
  Seeded seeded;
  BertForQuestionAnswering net = tiny_bert(0.0);  // train mode is deterministic
  auto [ids, types, mask] = padded_batch({64, 40, 64, 5}, 64);
  const torch::Tensor real = mask.to(torch::kBool);
  net->eval();
  const auto [cpu_start, cpu_end] = net->forward(ids, types, mask);
  net->to(torch::kCUDA);
  const torch::Tensor ids_gpu = ids.cuda(), types_gpu = types.cuda(), mask_gpu = mask.cuda();
  for (const bool bf16 : {false, true}) {
    INFO("bf16 " << bf16);
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(torch::kCUDA, torch::kBFloat16);
    const double tolerance = bf16 ? 3e-2 : 1e-4;
    net->bert->set_unpad(false);
    net->train();
    const auto [start, end] = net->forward(ids_gpu, types_gpu, mask_gpu);
    CHECK(relative_difference(start.cpu().masked_select(real), cpu_start.masked_select(real)) < tolerance);
    CHECK(relative_difference(end.cpu().masked_select(real), cpu_end.masked_select(real)) < tolerance);
    net->bert->set_unpad(true);
    const auto [u_start, u_end] = net->forward(ids_gpu, types_gpu, mask_gpu);
    CHECK(relative_difference(u_start.cpu().masked_select(real), cpu_start.masked_select(real)) < tolerance);
    CHECK(torch::isneginf(u_start.cpu().masked_select(real.logical_not())).all().item<bool>());
    question_answering_loss(u_start, u_end, torch::tensor({3, 5, 1, 2}).cuda(), torch::tensor({4, 9, 2, 3}).cuda()).backward();
    const torch::Tensor grad = net->bert->encoder->named_parameters()["layer.0.attention.self.query.weight"].grad();
    REQUIRE(grad.defined());
    CHECK(torch::isfinite(grad).all().item<bool>());
    CHECK(grad.abs().sum().item<double>() > 0);
    net->zero_grad();
  }
  // bf16 took the varlen flash kernel (a refusal would have fallen back to padding, logged).
  const BertConfig& c = net->config();
  CHECK(frugal::detail::flash_varlen_usable(torch::empty({1, 3 * c.hidden_size}, torch::dtype(torch::kBFloat16).device(torch::kCUDA)),
                                            c.num_attention_heads));
}
