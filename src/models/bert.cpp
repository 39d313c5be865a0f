#include "frugal/models/bert.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "frugal/errors.hpp"
#include "frugal/io/safetensors.hpp"
#include "frugal/log.hpp"
#include "models/detail/cpu_attention.hpp"
#include "models/detail/cpu_linear.hpp"
#include "models/detail/dropout.hpp"
#include "models/detail/flash_varlen_attention.hpp"
#include "models/detail/gelu.hpp"
#include "models/detail/reused_grad_embedding.hpp"

namespace frugal {
namespace fs = std::filesystem;
namespace {

// aten::linear's computation: on [N, S, H] inputs one multiply with the bias fused in (torch::nn::Linear's
// C++ forward runs matmul, then adds the bias, and its gradient is summed, in separate passes), on
// the CPU through oneDNN unless frugal::set_cpu_gemm chose MKL.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) { return detail::linear(x, layer->weight, layer->bias); }

torch::nn::LayerNorm layer_norm(const BertConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
}

// Hugging Face's _init_weights: normal(0, initializer_range) weights, zero biases, the padding
// embedding row zero, LayerNorm 1 / 0.
void init_like_hugging_face(torch::nn::Module& module, const BertConfig& c) {
  torch::NoGradGuard no_grad;
  auto init = [&c](torch::nn::Module& m) {
    if (auto* linear = m.as<torch::nn::Linear>()) {
      linear->weight.normal_(0.0, c.initializer_range);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = m.as<torch::nn::Embedding>()) {
      embedding->weight.normal_(0.0, c.initializer_range);
      const auto& pad = embedding->options.padding_idx();
      if (pad && *pad >= 0 && *pad < embedding->weight.size(0)) embedding->weight[*pad].zero_();
    } else if (auto* norm = m.as<torch::nn::LayerNorm>()) {
      norm->weight.fill_(1.0);
      norm->bias.zero_();
    }
  };
  init(module);  // (modules(include_self) needs a module already held by a shared_ptr)
  for (auto& m : module.modules(/*include_self=*/false)) init(*m);
}

void check_seq_len(const BertConfig& c, int64_t seq_len) {
  if (seq_len > c.max_position_embeddings) {
    throw TrainingError(c10::str("BERT: sequence length ", seq_len, " exceeds max_position_embeddings ", c.max_position_embeddings));
  }
}

// Unpadded rows [T, C] back at their places in the padded batch, [N * S, C], `fill` at padding.
torch::Tensor padded_rows(const torch::Tensor& rows, const BertTokens& tokens, double fill) {
  return torch::full({tokens.batch * tokens.seq_len, rows.size(-1)}, fill, rows.options()).index_copy(0, tokens.index, rows);
}

torch::Tensor activation(const torch::Tensor& x, const std::string& name) {
  if (name == "gelu") return detail::gelu(x);
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return torch::gelu(x, "tanh");
  return torch::relu(x);
}

}  // namespace

BertConfig BertConfig::from_json_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw DataError(file.string(), -1, "cannot open (a Hugging Face model directory holds config.json)");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(file.string(), static_cast<int64_t>(e.byte) - 1, c10::str("not valid JSON: ", e.what()));
  }
  if (!json.is_object()) throw DataError(file.string(), -1, "is not a JSON object");
  BertConfig c;
  auto integer = [&](const char* key, int64_t& field) {
    if (!json.contains(key)) return;
    if (!json[key].is_number_integer()) throw DataError(file.string(), -1, c10::str("$.", key, ": expected an integer"));
    field = json[key].get<int64_t>();
  };
  auto number = [&](const char* key, double& field) {
    if (!json.contains(key)) return;
    if (!json[key].is_number()) throw DataError(file.string(), -1, c10::str("$.", key, ": expected a number"));
    field = json[key].get<double>();
  };
  integer("vocab_size", c.vocab_size);
  integer("hidden_size", c.hidden_size);
  integer("num_hidden_layers", c.num_hidden_layers);
  integer("num_attention_heads", c.num_attention_heads);
  integer("intermediate_size", c.intermediate_size);
  integer("max_position_embeddings", c.max_position_embeddings);
  integer("type_vocab_size", c.type_vocab_size);
  if (json.contains("pad_token_id") && json["pad_token_id"].is_number_integer()) c.pad_token_id = json["pad_token_id"].get<int64_t>();
  number("hidden_dropout_prob", c.hidden_dropout_prob);
  number("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  number("layer_norm_eps", c.layer_norm_eps);
  number("initializer_range", c.initializer_range);
  if (json.contains("hidden_act")) {
    if (!json["hidden_act"].is_string()) throw DataError(file.string(), -1, "$.hidden_act: expected a string");
    c.hidden_act = json["hidden_act"].get<std::string>();
  }
  if (json.contains("position_embedding_type") && json["position_embedding_type"] != "absolute") {
    throw DataError(file.string(), -1, "$.position_embedding_type: only \"absolute\" is supported");
  }
  try {
    c.validate();
  } catch (const OptionError& e) {
    throw DataError(file.string(), -1, c10::str("$.", e.option(), ": ", e.what()));
  }
  return c;
}

BertConfig BertConfig::preset(const std::string& name) {
  BertConfig c;
  if (name == "tiny") {
    c.hidden_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.intermediate_size = 512;
  } else if (name == "large") {
    c.hidden_size = 1024;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 16;
    c.intermediate_size = 4096;
  } else if (name != "base") {
    throw OptionError("preset", c10::str("unknown BERT preset '", name, "' (tiny, base, large)"));
  }
  return c;
}

void BertConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v < 1) throw OptionError(field, c10::str(field, " must be >= 1, got ", v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("type_vocab_size", type_vocab_size);
  if (hidden_size % num_attention_heads != 0) {
    throw OptionError("num_attention_heads", c10::str("hidden_size ", hidden_size, " is not a multiple of num_attention_heads ",
                                                      num_attention_heads));
  }
  if (hidden_act != "gelu" && hidden_act != "gelu_new" && hidden_act != "gelu_pytorch_tanh" && hidden_act != "relu") {
    throw OptionError("hidden_act", "hidden_act must be gelu, gelu_new, gelu_pytorch_tanh or relu, got " + hidden_act);
  }
  for (const double p : {hidden_dropout_prob, attention_probs_dropout_prob}) {
    if (p < 0 || p >= 1) throw OptionError("hidden_dropout_prob", c10::str("dropout probabilities must be in [0, 1), got ", p));
  }
}

double BertConfig::forward_flops(int64_t seq_len) const {
  const double s = static_cast<double>(seq_len), h = static_cast<double>(hidden_size), i = static_cast<double>(intermediate_size);
  const double per_layer = 2 * s * (4 * h * h + 2 * h * i) + 2 * 2 * s * s * h;  // projections + MLP, QK^T and AV
  return static_cast<double>(num_hidden_layers) * per_layer + 2 * s * h * 2;     // + the QA head
}

void BertEmbeddingsImpl::reset() {
  const auto& c = config_;
  word_embeddings = register_module("word_embeddings",
                                    torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size).padding_idx(c.pad_token_id)));
  position_embeddings = register_module("position_embeddings", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab_size, c.hidden_size));
  LayerNorm = register_module("LayerNorm", layer_norm(c));
  word_grad_storage_ = std::make_shared<detail::GradStorage>();
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& positions) {
  torch::Tensor at = positions;
  if (!at.defined()) {
    check_seq_len(config_, input_ids.size(1));
    at = torch::arange(input_ids.size(1), input_ids.options().dtype(torch::kLong)).unsqueeze(0);
  }
  const torch::Tensor& words = word_embeddings->weight;
  const torch::Tensor word_vectors = is_training() && words.device().is_cpu() && words.requires_grad()
                                         ? detail::reused_grad_embedding(words, input_ids, word_embeddings->options.padding_idx().value_or(-1), word_grad_storage_)
                                         : word_embeddings(input_ids);
  torch::Tensor x = word_vectors + token_type_embeddings(token_type_ids) + position_embeddings(at);
  return detail::dropout(LayerNorm(x), config_.hidden_dropout_prob, is_training());
}

void BertSelfAttentionImpl::reset() {
  const int64_t h = config_.hidden_size;
  query = register_module("query", torch::nn::Linear(h, h));
  key = register_module("key", torch::nn::Linear(h, h));
  value = register_module("value", torch::nn::Linear(h, h));
}

torch::Tensor BertSelfAttentionImpl::forward(const torch::Tensor& hidden, const BertTokens& tokens) {
  // One matrix multiply for query, key and value (the weights keep Hugging Face's three names).
  torch::Tensor qkv = detail::linear(hidden, torch::cat({query->weight, key->weight, value->weight}),
                                     torch::cat({query->bias, key->bias, value->bias}));
  if (!checkpoint_core_) return attend(std::move(qkv), tokens, hidden.sizes());
  // The core has no parameters: only the projection is kept for backward.
  return activation_checkpoint(
      [this, tokens, sizes = hidden.sizes().vec()](const torch::autograd::variable_list& in) {
        return torch::autograd::variable_list{attend(in[0], tokens, sizes)};
      },
      {qkv}, {}, {}, core_options_)[0];
}

torch::Tensor BertSelfAttentionImpl::attend(torch::Tensor qkv, const BertTokens& tokens, c10::IntArrayRef hidden_sizes) {
  const int64_t n = tokens.batch, s = tokens.seq_len, heads = config_.num_attention_heads, h = config_.hidden_size;
  const int64_t d = h / heads;
  const double dropout = is_training() ? config_.attention_probs_dropout_prob : 0.0;
  // What SDPA's math path computes on the CPU in training, with the faster dropout: in fp32 without its copies.
  const bool cpu_training = dropout > 0 && qkv.device().is_cpu();
  if (cpu_training && qkv.scalar_type() == torch::kFloat && tokens.cpu_spans) {
    return detail::cpu_attention(qkv.view({-1, 3 * h}), *tokens.cpu_spans, heads, dropout).view(hidden_sizes);
  }
  if (tokens.cu_seqlens.defined() && detail::flash_varlen_usable(qkv, heads)) {
    const torch::Tensor context = detail::flash_varlen_attention(qkv, tokens.cu_seqlens, tokens.max_len, heads, dropout);
    if (context.defined()) return context;
  }
  // Otherwise on the padded batch, masked (unpadded tokens are put back in place around it).
  if (tokens.unpadded()) qkv = padded_rows(qkv, tokens, 0.0);
  const std::vector<torch::Tensor> parts = qkv.view({n, s, 3, heads, d}).permute({2, 0, 3, 1, 4}).unbind(0);  // [N, heads, S, d]
  torch::Tensor context;
  if (cpu_training) {  // under CPU autocast, or a mask that is not a prefix
    torch::Tensor scores = torch::matmul(parts[0], parts[1].transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(d)));
    scores.masked_fill_(tokens.mask.logical_not(), -std::numeric_limits<double>::infinity());
    context = torch::matmul(detail::dropout(torch::softmax(scores, -1), dropout, true), parts[2]);
  } else {
    context = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], tokens.mask, dropout);
  }
  context = context.transpose(1, 2).reshape({n * s, h});
  return tokens.unpadded() ? context.index_select(0, tokens.index) : context.view({n, s, h});
}

void BertResidualOutputImpl::reset() {
  dense = register_module("dense", torch::nn::Linear(in_features_, config_.hidden_size));
  LayerNorm = register_module("LayerNorm", layer_norm(config_));
}

torch::Tensor BertResidualOutputImpl::forward(const torch::Tensor& x, const torch::Tensor& residual) {
  return LayerNorm(detail::dropout(linear(dense, x), config_.hidden_dropout_prob, is_training()) + residual);
}

void BertAttentionImpl::reset() {
  self = register_module("self", BertSelfAttention(config_));
  output = register_module("output", BertResidualOutput(config_, config_.hidden_size));
}

torch::Tensor BertAttentionImpl::forward(const torch::Tensor& hidden, const BertTokens& tokens) {
  return output(self(hidden, tokens), hidden);
}

void BertIntermediateImpl::reset() { dense = register_module("dense", torch::nn::Linear(config_.hidden_size, config_.intermediate_size)); }

torch::Tensor BertIntermediateImpl::forward(const torch::Tensor& x) { return activation(linear(dense, x), config_.hidden_act); }

void BertLayerImpl::reset() {
  attention = register_module("attention", BertAttention(config_));
  intermediate = register_module("intermediate", BertIntermediate(config_));
  output = register_module("output", BertResidualOutput(config_, config_.intermediate_size));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& hidden, const BertTokens& tokens) {
  const torch::Tensor attended = attention(hidden, tokens);
  return output(intermediate(attended), attended);
}

void BertEncoderImpl::reset() {
  layer = register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) layer->push_back(BertLayer(config_));
}

void BertEncoderImpl::set_activation_checkpointing(const ActivationCheckpointing& plan) {
  if (plan.scope == CheckpointScope::stage) {
    throw OptionError("activation_checkpointing", "BERT takes activation checkpointing off, full, every:K or attention; stage is ResNet's");
  }
  checkpointing_ = plan;
  for (size_t i = 0; i < layer->size(); ++i) {
    const bool last = i + 1 == layer->size();  // see forward()
    layer->ptr<BertLayerImpl>(i)->attention->self->set_checkpoint_core(plan.scope == CheckpointScope::attention && !last, plan.options());
  }
}

torch::Tensor BertEncoderImpl::forward(torch::Tensor hidden, const BertTokens& tokens) {
  for (size_t i = 0; i < layer->size(); ++i) {
    auto block = layer->ptr<BertLayerImpl>(i);
    // The last layer is never recomputed: its backward comes right after its forward, so keeping its
    // activations holds no more memory than recomputing them would (as torch's checkpoint_sequential).
    if (!checkpointing_.covers_layer(static_cast<int64_t>(i)) || i + 1 == layer->size()) {
      hidden = block->forward(hidden, tokens);
      continue;
    }
    // The layer keeps only its input; the closure holds the layer and this batch's tokens until backward.
    hidden = activation_checkpoint(
        [block, tokens](const torch::autograd::variable_list& in) { return torch::autograd::variable_list{block->forward(in[0], tokens)}; },
        {hidden}, block->parameters(), block->buffers(), checkpointing_.options())[0];
  }
  return hidden;
}

void BertModelImpl::reset() {
  config_.validate();
  embeddings = register_module("embeddings", BertEmbeddings(config_));
  encoder = register_module("encoder", BertEncoder(config_));
  init_like_hugging_face(*this, config_);
}

BertTokens BertModelImpl::tokens(const torch::Tensor& attention_mask) const {
  BertTokens tokens;
  tokens.batch = attention_mask.size(0);
  tokens.seq_len = attention_mask.size(1);
  const torch::Tensor real = attention_mask.to(torch::kBool);
  tokens.mask = real.view({tokens.batch, 1, 1, tokens.seq_len});
  const bool cpu_training = is_training() && attention_mask.device().is_cpu();
  const torch::Tensor lengths = unpad_ ? real.sum(1).to(torch::kCPU) : torch::Tensor();  // one device sync
  const int64_t shortest = unpad_ ? lengths.min().item<int64_t>() : tokens.seq_len;
  if (shortest < tokens.seq_len) {
    if (shortest == 0) {
      throw TrainingError(c10::str("BERT unpadding: attention_mask row ", lengths.argmin().item<int64_t>(), " has no real token"));
    }
    tokens.index = real.flatten().nonzero().squeeze(1);
    if (!attention_mask.device().is_cpu()) {
      tokens.cu_seqlens = torch::cat({torch::zeros({1}, torch::kLong), lengths.cumsum(0)}).to(attention_mask.device(), torch::kInt32);
      tokens.max_len = lengths.max().item<int64_t>();
    }
    if (cpu_training) {
      const auto* length = lengths.const_data_ptr<int64_t>();
      tokens.cpu_spans = std::make_shared<const detail::AttentionSpans>(
          detail::packed_spans(std::vector<int64_t>(length, length + tokens.batch)));
    }
  } else if (cpu_training) {
    if (auto spans = detail::padded_spans(real)) tokens.cpu_spans = std::make_shared<const detail::AttentionSpans>(std::move(*spans));
  }
  return tokens;
}

torch::Tensor BertModelImpl::encode(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const BertTokens& tokens) {
  if (!tokens.unpadded()) return encoder(embeddings(input_ids, token_type_ids), tokens);
  check_seq_len(config_, tokens.seq_len);
  const torch::Tensor& at = tokens.index;
  return encoder(embeddings(input_ids.flatten().index_select(0, at), token_type_ids.flatten().index_select(0, at), at.remainder(tokens.seq_len)),
                 tokens);
}

torch::Tensor BertModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                     const torch::Tensor& attention_mask) {
  const BertTokens batch = tokens(attention_mask);
  const torch::Tensor hidden = encode(input_ids, token_type_ids, batch);
  if (!batch.unpadded()) return hidden;
  return padded_rows(hidden, batch, 0.0).view({batch.batch, batch.seq_len, hidden.size(-1)});
}

void BertForQuestionAnsweringImpl::reset() {
  bert = register_module("bert", BertModel(config_));
  qa_outputs = register_module("qa_outputs", torch::nn::Linear(config_.hidden_size, 2));
  init_qa_head();
}

void BertForQuestionAnsweringImpl::init_qa_head() { init_like_hugging_face(*qa_outputs, config_); }

std::pair<torch::Tensor, torch::Tensor> BertForQuestionAnsweringImpl::forward(const torch::Tensor& input_ids,
                                                                               const torch::Tensor& token_type_ids,
                                                                               const torch::Tensor& attention_mask) {
  const BertTokens batch = bert->tokens(attention_mask);
  torch::Tensor logits = linear(qa_outputs, bert->encode(input_ids, token_type_ids, batch));
  if (logits.scalar_type() != torch::kFloat64) logits = logits.to(torch::kFloat32);  // fp16/bf16 under autocast
  if (batch.unpadded()) {  // padding: no probability
    logits = padded_rows(logits, batch, -std::numeric_limits<double>::infinity()).view({batch.batch, batch.seq_len, 2});
  }
  auto parts = logits.split(1, -1);
  return {parts[0].squeeze(-1), parts[1].squeeze(-1)};
}

torch::Tensor question_answering_loss(const torch::Tensor& start_logits, const torch::Tensor& end_logits,
                                      const torch::Tensor& start_positions, const torch::Tensor& end_positions) {
  return (torch::nn::functional::cross_entropy(start_logits, start_positions) +
          torch::nn::functional::cross_entropy(end_logits, end_positions)) /
         2;
}

BertForQuestionAnswering load_bert_for_qa(const fs::path& model_dir, int64_t keep_layers) {
  BertConfig config = BertConfig::from_json_file(model_dir / "config.json");
  if (keep_layers > config.num_hidden_layers || keep_layers < 0) {
    throw OptionError("model.layers", c10::str("model.layers: ", model_dir.string(), " has ", config.num_hidden_layers,
                                               " layers, cannot keep ", keep_layers));
  }
  if (keep_layers > 0) config.num_hidden_layers = keep_layers;
  BertForQuestionAnswering net(config);
  const fs::path weights = model_dir / "model.safetensors";
  SafetensorsReader reader(weights);
  // File name → the model's name: "bert." prefix optional (BertModel checkpoints lack it), old
  // TensorFlow-era LayerNorm names "gamma"/"beta".
  bool prefixed = false;
  for (const auto& name : reader.names()) prefixed = prefixed || name.rfind("bert.", 0) == 0;
  auto model_name = [&](std::string name) {
    if (!prefixed && name.rfind("qa_outputs.", 0) != 0) name = "bert." + name;
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"LayerNorm.gamma", "LayerNorm.weight"}, {"LayerNorm.beta", "LayerNorm.bias"}}) {
      if (name.size() >= from.size() && name.compare(name.size() - from.size(), from.size(), from) == 0) {
        name = name.substr(0, name.size() - from.size()) + to;
      }
    }
    return name;
  };
  std::map<std::string, std::string> file_of;
  for (const auto& name : reader.names()) file_of.emplace(model_name(name), name);
  torch::NoGradGuard no_grad;
  std::vector<std::string> ignored;
  std::set<std::string> used;
  bool head_missing = false;
  for (auto& item : net->named_parameters(/*recurse=*/true)) {
    const auto it = file_of.find(item.key());
    if (it == file_of.end()) {
      if (item.key().rfind("qa_outputs.", 0) == 0) {
        head_missing = true;
        continue;
      }
      throw DataError(weights.string(), -1, "has no tensor for the encoder's '" + item.key() + "'");
    }
    const SafetensorsEntry& e = reader.entry(it->second);
    if (c10::IntArrayRef(e.shape) != item.value().sizes()) {
      throw DataError(weights.string(), -1, c10::str("tensor '", it->second, "' has shape ", c10::IntArrayRef(e.shape), " but ",
                                                     model_dir / "config.json", " makes '", item.key(), "' ", item.value().sizes()));
    }
    item.value().copy_(reader.read(it->second));
    used.insert(it->second);
  }
  for (const auto& name : reader.names()) {
    if (!used.count(name)) ignored.push_back(name);
  }
  if (head_missing) {
    net->init_qa_head();
    log::info(c10::str(weights.string(), " holds no question-answering head: qa_outputs initialised (normal, std ",
                       config.initializer_range, ")"));
  }
  if (!ignored.empty()) {
    log::info(c10::str("ignored ", ignored.size(), " tensors of ", weights.string(), " that question answering does not use (first: '",
                       ignored.front(), "')"));
  }
  return net;
}

}  // namespace frugal
