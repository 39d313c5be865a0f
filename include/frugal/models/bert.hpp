#pragma once
// BERT for extractive question answering with Hugging Face's parameter names
// (BertForQuestionAnswering: "bert.embeddings.word_embeddings.weight",
// "bert.encoder.layer.0.attention.self.query.weight" ... "qa_outputs.weight"), so a Hugging Face
// model directory (config.json + model.safetensors) loads directly, whether it holds a QA head or
// only the encoder. Attention goes through at::scaled_dot_product_attention, which picks the
// flash or memory-efficient kernels on a GPU; training on the CPU in fp32 uses Frugal's own
// attention with a hand-written backward (src/models/detail/cpu_attention.hpp).
//
// Unpadding (opt-in, set_unpad): the encoder runs on the real tokens only, packed end to end, so
// no matrix multiply is spent on padding (54% of the tokens of SQuAD v1.1 windows of 384). What
// the real tokens compute is unchanged: padding is never a key. Only the question-answering
// logits at padded positions differ: -inf (no probability) where Hugging Face computes a value
// that enters its softmax.
//
//   frugal::BertForQuestionAnswering net = frugal::load_bert_for_qa("models/bert-large-uncased");
//   net->bert->set_unpad(true);
//   auto [start, end] = net->forward(input_ids, token_type_ids, attention_mask);  // [N, S] each

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "frugal/memory/checkpoint_plan.hpp"

namespace frugal {
namespace detail {
class GradStorage;
struct AttentionSpans;
}

/// The fields of a Hugging Face BERT config.json that shape the model.
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";  // gelu (exact), gelu_new / gelu_pytorch_tanh (tanh), relu
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;
  int64_t pad_token_id = 0;

  /// Reads a Hugging Face config.json; DataError naming the file and key on a bad value.
  static BertConfig from_json_file(const std::filesystem::path& file);
  /// "tiny" (2 layers, 128 hidden), "base" or "large" (BERT-large: 24 layers, 1024 hidden, 16 heads).
  static BertConfig preset(const std::string& name);
  /// Throws OptionError naming the bad field and value.
  void validate() const;
  /// Multiply-accumulates x 2 of one forward pass over `seq_len` tokens (matmuls and attention).
  double forward_flops(int64_t seq_len) const;
};

/// The tokens the encoder runs on, made once per batch by BertModelImpl::tokens: every position
/// of the padded [N, S] batch, attention masked to the real tokens; or, unpadded, the real tokens
/// only, packed end to end ([T, H] hidden states).
struct BertTokens {
  int64_t batch = 0, seq_len = 0;
  torch::Tensor mask;   // bool [N, 1, 1, S], true = a real token (attended)
  torch::Tensor index;  // unpadded: int64 [T], the real tokens' positions in the flattened [N * S]
  std::shared_ptr<const detail::AttentionSpans> cpu_spans;  // for the CPU training attention; null: mask instead
  torch::Tensor cu_seqlens;  // unpadded on a GPU: int32 [N + 1], the sequences' starts and the end (the flash kernel's)
  int64_t max_len = 0;       // unpadded on a GPU: the longest sequence
  bool unpadded() const { return index.defined(); }
};

class BertEmbeddingsImpl : public torch::nn::Cloneable<BertEmbeddingsImpl> {
 public:
  explicit BertEmbeddingsImpl(BertConfig config) : config_(std::move(config)) { reset(); }
  void reset() override;
  /// Embeddings of ids [N, S] at positions 0..S-1, or of any shape of ids at the given positions.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& positions = {});
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};  // Hugging Face's name

 private:
  BertConfig config_;
  std::shared_ptr<detail::GradStorage> word_grad_storage_;  // the word embeddings' gradient, kept between steps on the CPU
};
TORCH_MODULE(BertEmbeddings);

/// "query", "key", "value" projections; attention itself is computed by BertAttention.
class BertSelfAttentionImpl : public torch::nn::Cloneable<BertSelfAttentionImpl> {
 public:
  explicit BertSelfAttentionImpl(BertConfig config) : config_(std::move(config)) { reset(); }
  void reset() override;
  /// Attention of hidden ([N, S, H], or [T, H] unpadded) over each sequence's real tokens; same shape.
  torch::Tensor forward(const torch::Tensor& hidden, const BertTokens& tokens);
  /// Recompute the attention core (scores, softmax, dropout, context) in backward instead of
  /// keeping its activations, which grow with the square of the sequence.
  void set_checkpoint_core(bool on, ActivationCheckpointOptions options = {}) {
    checkpoint_core_ = on;
    core_options_ = options;
  }
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  /// The attention core: the context of the fused query/key/value projection.
  torch::Tensor attend(torch::Tensor qkv, const BertTokens& tokens, c10::IntArrayRef hidden_sizes);
  BertConfig config_;
  bool checkpoint_core_ = false;
  ActivationCheckpointOptions core_options_;
};
TORCH_MODULE(BertSelfAttention);

/// "dense" + dropout + residual + "LayerNorm": Hugging Face's BertSelfOutput and BertOutput.
class BertResidualOutputImpl : public torch::nn::Cloneable<BertResidualOutputImpl> {
 public:
  BertResidualOutputImpl(BertConfig config, int64_t in_features) : config_(std::move(config)), in_features_(in_features) { reset(); }
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual);
  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};

 private:
  BertConfig config_;
  int64_t in_features_;
};
TORCH_MODULE(BertResidualOutput);

class BertAttentionImpl : public torch::nn::Cloneable<BertAttentionImpl> {
 public:
  explicit BertAttentionImpl(BertConfig config) : config_(std::move(config)) { reset(); }
  void reset() override;
  torch::Tensor forward(const torch::Tensor& hidden, const BertTokens& tokens);
  BertSelfAttention self{nullptr};  // registered as "self"
  BertResidualOutput output{nullptr};

 private:
  BertConfig config_;
};
TORCH_MODULE(BertAttention);

/// "dense" then the activation.
class BertIntermediateImpl : public torch::nn::Cloneable<BertIntermediateImpl> {
 public:
  explicit BertIntermediateImpl(BertConfig config) : config_(std::move(config)) { reset(); }
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear dense{nullptr};

 private:
  BertConfig config_;
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Cloneable<BertLayerImpl> {
 public:
  explicit BertLayerImpl(BertConfig config) : config_(std::move(config)) { reset(); }
  void reset() override;
  torch::Tensor forward(const torch::Tensor& hidden, const BertTokens& tokens);
  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};

 private:
  BertConfig config_;
};
TORCH_MODULE(BertLayer);

/// "layer.<i>".
class BertEncoderImpl : public torch::nn::Cloneable<BertEncoderImpl> {
 public:
  explicit BertEncoderImpl(BertConfig config) : config_(std::move(config)) { reset(); }
  void reset() override;
  torch::Tensor forward(torch::Tensor hidden, const BertTokens& tokens);
  /// Layers (full, every:K) or their attention cores (attention) recomputed in backward;
  /// OptionError for scopes that are not BERT's (stage).
  void set_activation_checkpointing(const ActivationCheckpointing& plan);
  const ActivationCheckpointing& activation_checkpointing() const { return checkpointing_; }
  torch::nn::ModuleList layer{nullptr};

 private:
  BertConfig config_;
  ActivationCheckpointing checkpointing_;
};
TORCH_MODULE(BertEncoder);

/// "embeddings" and "encoder" (no pooler: question answering does not use it).
class BertModelImpl : public torch::nn::Cloneable<BertModelImpl> {
 public:
  explicit BertModelImpl(BertConfig config) : config_(std::move(config)) { reset(); }
  void reset() override;
  /// Hidden states [N, S, H]; attention_mask [N, S] is 1 for tokens and 0 for padding. Unpadded,
  /// the rows at padding are zero.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& attention_mask);
  /// The tokens this batch runs on (unpadded when set_unpad is on and the batch has padding).
  /// TrainingError when unpadding a row with no real token.
  BertTokens tokens(const torch::Tensor& attention_mask) const;
  /// Hidden states of `tokens`: [N, S, H], or [T, H] unpadded.
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const BertTokens& tokens);
  /// Run the encoder on the real tokens only (off by default: Hugging Face's padded computation).
  void set_unpad(bool unpad) { unpad_ = unpad; }
  bool unpad() const { return unpad_; }
  const BertConfig& config() const { return config_; }
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};

 private:
  BertConfig config_;
  bool unpad_ = false;
};
TORCH_MODULE(BertModel);

class BertForQuestionAnsweringImpl : public torch::nn::Cloneable<BertForQuestionAnsweringImpl> {
 public:
  explicit BertForQuestionAnsweringImpl(BertConfig config = {}) : config_(std::move(config)) { reset(); }
  void reset() override;
  /// Start and end logits [N, S], float32 under autocast (as the loss wants), float64 in float64;
  /// -inf at padded positions when bert->unpad() is on.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                                  const torch::Tensor& attention_mask);
  /// Initialises the QA head as Hugging Face does (normal(0, initializer_range), zero bias).
  void init_qa_head();
  const BertConfig& config() const { return config_; }
  BertModel bert{nullptr};
  torch::nn::Linear qa_outputs{nullptr};

 private:
  BertConfig config_;
};
TORCH_MODULE(BertForQuestionAnswering);

/// Hugging Face's QA loss: the mean of the start and end cross-entropies.
torch::Tensor question_answering_loss(const torch::Tensor& start_logits, const torch::Tensor& end_logits,
                                      const torch::Tensor& start_positions, const torch::Tensor& end_positions);

/// Loads a Hugging Face model directory (config.json, model.safetensors). Accepts a
/// BertForQuestionAnswering checkpoint or an encoder one (BertModel, BertForPreTraining: names
/// with or without "bert."; old "gamma"/"beta" LayerNorm names); a missing QA head is initialised
/// and the log says so; heads of other tasks are ignored and listed. A missing encoder tensor or
/// a shape mismatch is a DataError naming it.
/// `keep_layers` > 0: only the first N encoder layers (a truncated pretrained model; the others'
/// tensors are ignored); OptionError naming model.layers when the model has fewer.
BertForQuestionAnswering load_bert_for_qa(const std::filesystem::path& model_dir, int64_t keep_layers = 0);

}  // namespace frugal
