#pragma once
// What the BERT benchmarks share: a data set of random token ids and BertForQuestionAnswering as a
// Frugal Model with the example's optimizer (FusedAdamW without decay on biases and LayerNorm).

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "frugal/frugal.hpp"

namespace frugal::bench {

/// A BERT of the given size with BERT's usual proportions (feed-forward 4 x hidden).
inline frugal::BertConfig bert_config(int64_t hidden, int64_t layers, int64_t heads) {
  frugal::BertConfig c;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.intermediate_size = 4 * hidden;
  return c;
}

// One fixed batch of random token ids, padded (id 0) after the given lengths, served for every
// index (the model is what is measured).
class RandomTokens : public frugal::Dataset {
 public:
  RandomTokens(int64_t vocab, int64_t seq, const std::vector<int64_t>& lengths) : size_(static_cast<int64_t>(lengths.size())) {
    torch::Generator gen = at::detail::createCPUGenerator(0);
    mask_ = torch::arange(seq).unsqueeze(0).lt(torch::tensor(lengths).unsqueeze(1)).to(torch::kInt64);
    ids_ = torch::randint(1, vocab, {size_, seq}, gen, torch::kInt64) * mask_;
    positions_ = (torch::rand({size_, 2}, gen) * (torch::tensor(lengths).unsqueeze(1) - 1)).to(torch::kInt64);
  }
  int64_t size() const override { return size_; }
  frugal::Batch get_batch(const std::vector<int64_t>& indices) const override {
    const torch::Tensor at = torch::tensor(indices, torch::kInt64);
    const torch::Tensor ids = ids_.index_select(0, at);
    return {ids, positions_.index_select(0, at), {{"token_type_ids", torch::zeros_like(ids)}, {"attention_mask", mask_.index_select(0, at)}}};
  }

 private:
  int64_t size_;
  torch::Tensor ids_, mask_, positions_;
};

/// The question-answering loss of `net` on batches made by RandomTokens.
inline frugal::Model qa_model(const frugal::BertForQuestionAnswering& net) {
  return frugal::Model(net.ptr(), frugal::LossFn<frugal::BertForQuestionAnsweringImpl>([](frugal::BertForQuestionAnsweringImpl& n,
                                                                                          const frugal::Batch& b) {
                         auto [start, end] = n.forward(b.input, b.extra.at("token_type_ids"), b.extra.at("attention_mask"));
                         return frugal::question_answering_loss(start, end, b.target.select(1, 0), b.target.select(1, 1));
                       }));
}

/// The BERT example's optimizer at its defaults.
inline std::unique_ptr<torch::optim::Optimizer> qa_adamw(torch::nn::Module& m) {
  const auto o = torch::optim::AdamWOptions(3e-5).eps(1e-6).weight_decay(0.01);
  return std::make_unique<frugal::FusedAdamW>(frugal::weight_decay_groups(m, o, frugal::is_bias_or_layer_norm), o);
}

}  // namespace frugal::bench
