// Frugal's BERT example: fine-tuning BertForQuestionAnswering on SQuAD v1.1 as NVIDIA's and
// Hugging Face's reference scripts do: WordPiece features with max_seq_length 384, doc_stride
// 128, max_query_length 64 (cached by the preprocessing cache), AdamW without weight decay on
// biases and LayerNorm, linear warm-up then linear decay, the n-best span search and the official
// EM/F1. It writes predictions.json in the official format. Every Frugal policy is a key or flag.
//
//   build/examples/bert_squad/frugal_bert_squad --config examples/bert_squad/tiny.toml   # bundled default
//   build/examples/bert_squad/frugal_bert_squad --model.dir=models/bert-large-uncased-whole-word-masking
//       --squad.train=data/squad/train-v1.1.json --squad.dev=data/squad/dev-v1.1.json
//       --precision.mode=bf16 --data.batch_size=32 --trainer.max_epochs=2

#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "frugal/frugal.hpp"
#include "squad_data.hpp"

namespace {
namespace fs = std::filesystem;

struct ModelOptions {
  std::string dir;     // a Hugging Face model directory (config.json, vocab.txt, model.safetensors)
  std::string config;  // without dir: a config.json to start from random weights
  std::string vocab;   // without dir: its vocab.txt
  bool lower_case = true;
  int64_t seed = 0;
  bool unpad = true;  // the encoder on the real tokens only (SQuAD windows are about half padding)
  std::string cpu_gemm = frugal::to_string(frugal::cpu_gemm());
  std::string activation_checkpointing = "off";  // off | full | every:K | attention
  bool activation_offload = false;
  // The architecture (an architecture search's keys); 0 = the config's. model.layers also keeps
  // the first N layers of a pretrained model.dir.
  int64_t layers = 0, hidden_size = 0, heads = 0, intermediate_size = 0;
};

struct SquadOptions {
  std::string train, dev;
  frugal::SquadFeatureOptions features;
  frugal::SquadDecodeOptions decode;
  std::string cache = "cache/bert_features";
  std::string predictions;  // "" = <run_dir>/predictions.json
};

struct OptimizerOptions {
  double lr = 3e-5;
  double weight_decay = 0.01;
  double eps = 1e-6;
  double warmup_fraction = 0.1;
  bool fused = true;  // one fused kernel per step (Hugging Face Trainer's default, adamw_torch_fused)
};

std::unique_ptr<torch::optim::Optimizer> make_adamw(torch::nn::Module& module, const OptimizerOptions& o,
                                                    const frugal::StateQuantization& states) {
  const auto options = torch::optim::AdamWOptions(o.lr).eps(o.eps).weight_decay(o.weight_decay);
  auto groups = frugal::weight_decay_groups(module, options, frugal::is_bias_or_layer_norm);
  if (o.fused) return std::make_unique<frugal::FusedAdamW>(std::move(groups), options, states);
  return std::make_unique<torch::optim::AdamW>(std::move(groups), options);
}

// model.config with the architecture keys given on top (a model trained from scratch).
frugal::BertConfig architecture_of(const ModelOptions& m) {
  frugal::BertConfig c = frugal::BertConfig::from_json_file(m.config);
  if (m.layers > 0) c.num_hidden_layers = m.layers;
  if (m.hidden_size > 0) c.hidden_size = m.hidden_size;
  if (m.heads > 0) c.num_attention_heads = m.heads;
  if (m.intermediate_size > 0) c.intermediate_size = m.intermediate_size;
  if (c.hidden_size % c.num_attention_heads != 0) {
    throw frugal::OptionError("model.heads", c10::str("model.heads: ", c.num_attention_heads, " heads do not divide the hidden size ", c.hidden_size));
  }
  c.validate();
  return c;
}

void bind_example(frugal::Config& config, ModelOptions& m, SquadOptions& s, OptimizerOptions& o, const frugal::StateQuantization& states) {
  config.bind("model.dir", m.dir, "Hugging Face model directory (config.json, vocab.txt, model.safetensors)");
  config.bind("model.config", m.config, "Without model.dir: config.json of a model trained from random weights");
  config.bind("model.vocab", m.vocab, "Without model.dir: its vocab.txt");
  config.bind("model.lower_case", m.lower_case, "Uncased model: lower-case and strip accents");
  config.bind("model.seed", m.seed, "Seed of the random initialisation");
  config.bind("model.unpad", m.unpad,
              "Run the encoder on the real tokens only (padding takes no compute and no answer probability); false = "
              "Hugging Face's padded computation");
  config.bind("model.cpu_gemm", m.cpu_gemm, "Library for the linear layers' float32 multiplies on the CPU: onednn or mkl (torch::linear's)");
  config.bind("model.activation_checkpointing", m.activation_checkpointing,
              "Recompute activations in backward instead of keeping them: off, full (every encoder layer), every:K (layers 0, "
              "K, 2K...), attention (each layer's attention core: scores, softmax, dropout); full costs about one extra forward");
  config.bind("model.activation_offload", m.activation_offload, "On CUDA: checkpointed layers' inputs wait in pinned host memory");
  config.bind("model.layers", m.layers, "Encoder layers; 0 = the config's. With model.dir: its first N layers (a truncated pretrained model)");
  config.bind("model.hidden_size", m.hidden_size, "Without model.dir: hidden size; 0 = the config's");
  config.bind("model.heads", m.heads, "Without model.dir: attention heads (dividing the hidden size); 0 = the config's");
  config.bind("model.intermediate_size", m.intermediate_size, "Without model.dir: feed-forward size; 0 = the config's");
  config.bind("squad.train", s.train, "SQuAD v1.1 training file");
  config.bind("squad.dev", s.dev, "SQuAD v1.1 dev file: EM/F1 and predictions.json at the end; \"\" = none");
  config.bind("squad.max_seq_length", s.features.max_seq_length, "Tokens per window");
  config.bind("squad.doc_stride", s.features.doc_stride, "Tokens between window starts");
  config.bind("squad.max_query_length", s.features.max_query_length, "Question tokens kept");
  config.bind("squad.n_best", s.decode.n_best, "Start and end candidates per window");
  config.bind("squad.max_answer_length", s.decode.max_answer_length, "Longest answer, in tokens");
  config.bind("squad.cache", s.cache, "Preprocessing cache for the features; \"\" = tokenize every run");
  config.bind("squad.predictions", s.predictions, "Where to write predictions.json; \"\" = <run_dir>/predictions.json");
  config.bind("optimizer.lr", o.lr, "AdamW peak learning rate");
  config.bind("optimizer.weight_decay", o.weight_decay, "AdamW weight decay (not on biases and LayerNorm)");
  config.bind("optimizer.eps", o.eps, "AdamW epsilon");
  config.bind("optimizer.warmup_fraction", o.warmup_fraction, "Share of the steps spent warming up, then linear decay");
  config.bind("optimizer.fused", o.fused, "AdamW as one fused kernel (frugal::FusedAdamW); false = torch::optim::AdamW");
  config.add_check("model", [&m] {
    frugal::parse_enum_option<frugal::CpuGemm>(m.cpu_gemm, "model.cpu_gemm");
    if (frugal::ActivationCheckpointing::parse(m.activation_checkpointing, "model.activation_checkpointing").scope == frugal::CheckpointScope::stage) {
      throw frugal::OptionError("model.activation_checkpointing", "model.activation_checkpointing: stage is ResNet's; BERT takes off, full, every:K or attention");
    }
    for (const auto& [key, value] : {std::pair<const char*, int64_t>{"layers", m.layers}, {"hidden_size", m.hidden_size}, {"heads", m.heads},
                                     {"intermediate_size", m.intermediate_size}}) {
      if (value < 0) throw frugal::OptionError(key, c10::str(key, " must be >= 0 (0 = the config's), got ", value));
    }
    if (!m.dir.empty() && (m.hidden_size > 0 || m.heads > 0 || m.intermediate_size > 0)) {
      throw frugal::OptionError(m.hidden_size > 0 ? "hidden_size" : m.heads > 0 ? "heads" : "intermediate_size",
                                "model.hidden_size, model.heads and model.intermediate_size shape a model trained from scratch "
                                "(model.config); a pretrained model.dir keeps its own shape (model.layers keeps its first N layers)");
    }
  });
  config.add_check("squad", [&s] {
    if (s.features.max_seq_length < 8) throw frugal::OptionError("max_seq_length", "max_seq_length must be >= 8");
    if (s.features.doc_stride < 1) throw frugal::OptionError("doc_stride", "doc_stride must be >= 1");
    if (s.features.max_query_length < 1) throw frugal::OptionError("max_query_length", "max_query_length must be >= 1");
    if (s.decode.n_best < 1) throw frugal::OptionError("n_best", "n_best must be >= 1");
    if (s.decode.max_answer_length < 1) throw frugal::OptionError("max_answer_length", "max_answer_length must be >= 1");
  });
  config.add_check("optimizer", [&o, &states] {
    if (!(o.lr > 0)) throw frugal::OptionError("lr", c10::str("lr must be > 0, got ", o.lr));
    if (o.weight_decay < 0) throw frugal::OptionError("weight_decay", "weight_decay must be >= 0");
    if (o.warmup_fraction < 0 || o.warmup_fraction > 1) throw frugal::OptionError("warmup_fraction", "warmup_fraction must be in [0, 1]");
    // torch::optim::AdamW keeps fp32 moments only.
    if (states.bits() == 8 && !o.fused) throw frugal::OptionError("state_bits", "state_bits=8 needs optimizer.fused=true (frugal::FusedAdamW)");
  });
}

// Start and end logits of every feature, in batches, on the trainer's device.
std::pair<std::vector<float>, std::vector<float>> predict(frugal::BertForQuestionAnsweringImpl& net, const bert_example::FeatureTensors& f,
                                                          const torch::Device& device, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  net.eval();
  std::vector<torch::Tensor> starts, ends;
  for (int64_t i = 0; i < f.size(); i += batch_size) {
    const int64_t j = std::min(f.size(), i + batch_size);
    auto [s, e] = net.forward(f.input_ids.slice(0, i, j).to(device), f.token_type_ids.slice(0, i, j).to(device),
                              f.attention_mask.slice(0, i, j).to(device));
    starts.push_back(s.to(torch::kCPU, torch::kFloat32));
    ends.push_back(e.to(torch::kCPU, torch::kFloat32));
  }
  net.train();
  auto flat = [](const std::vector<torch::Tensor>& parts) {
    const torch::Tensor t = torch::cat(parts).contiguous();
    return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  };
  return {flat(starts), flat(ends)};
}

int run(int argc, char** argv) {
  frugal::StandardOptions options;
  options.trainer.max_epochs(2).run_dir("runs/bert_squad").log_every_n_steps(50);
  options.data.batch_size(32).drop_last(false);
  ModelOptions m;
  SquadOptions s;
  OptimizerOptions o;
  frugal::Config config;
  frugal::bind(config, options);
  bind_example(config, m, s, o, options.optimizer_states);
  const frugal::ProgramStart start = frugal::start_program(argc, argv, config, options, "Frugal BERT example: SQuAD v1.1 fine-tuning");
  const frugal::CommandLine& cli = start.cli;
  if (cli.exit_code) {
    std::cout << cli.message;
    return *cli.exit_code;
  }
  if (s.train.empty()) throw frugal::OptionError("squad.train", "squad.train: a SQuAD v1.1 training file is required");
  if (m.dir.empty() && (m.config.empty() || m.vocab.empty())) {
    throw frugal::OptionError("model.dir", "model.dir, or model.config and model.vocab, must name the model");
  }
  const fs::path vocab = m.dir.empty() ? fs::path(m.vocab) : fs::path(m.dir) / "vocab.txt";
  frugal::WordPieceOptions tokenizer_options;
  tokenizer_options.lower_case = m.lower_case;
  const frugal::WordPieceTokenizer tokenizer = frugal::WordPieceTokenizer::from_vocab_file(vocab, tokenizer_options);

  const auto train_examples = frugal::read_squad(s.train);
  auto train = std::make_shared<bert_example::FeatureDataset>(
      bert_example::squad_features(s.train, train_examples, tokenizer, vocab, s.features, /*training=*/true, s.cache));
  std::vector<frugal::SquadExample> dev_examples;
  std::shared_ptr<bert_example::FeatureDataset> dev;
  if (!s.dev.empty()) {
    dev_examples = frugal::read_squad(s.dev);
    dev = std::make_shared<bert_example::FeatureDataset>(
        bert_example::squad_features(s.dev, dev_examples, tokenizer, vocab, s.features, /*training=*/true, s.cache));
  }
  frugal::log::info(c10::str("SQuAD: ", train_examples.size(), " training questions in ", train->size(), " windows",
                             dev ? c10::str(", ", dev_examples.size(), " dev questions in ", dev->size(), " windows") : std::string()));

  frugal::preemption::stop_if_requested("preparing the SQuAD data");
  torch::manual_seed(static_cast<uint64_t>(m.seed));
  frugal::BertForQuestionAnswering net = m.dir.empty() ? frugal::BertForQuestionAnswering(architecture_of(m))
                                                       : frugal::load_bert_for_qa(m.dir, m.layers);
  const frugal::BertConfig& shape = net->config();
  frugal::log::info(c10::str("BERT: ", shape.num_hidden_layers, " layers, hidden ", shape.hidden_size, ", ", shape.num_attention_heads,
                             " heads, feed-forward ", shape.intermediate_size, m.dir.empty() ? ", random weights" : ", from " + m.dir));
  if (net->config().vocab_size < static_cast<int64_t>(tokenizer.vocab().size())) {
    throw frugal::DataError(vocab.string(), -1, c10::str("has ", tokenizer.vocab().size(), " entries but the model's vocab_size is ",
                                                         net->config().vocab_size));
  }
  net->bert->set_unpad(m.unpad);
  frugal::ActivationCheckpointing recompute = frugal::ActivationCheckpointing::parse(m.activation_checkpointing, "model.activation_checkpointing");
  recompute.offload = m.activation_offload;
  net->bert->encoder->set_activation_checkpointing(recompute);
  if (recompute.enabled()) {
    frugal::log::info("activation checkpointing: " + recompute.to_string() + (recompute.offload ? ", inputs offloaded to host memory" : ""));
  }
  frugal::set_cpu_gemm(frugal::parse_enum_option<frugal::CpuGemm>(m.cpu_gemm, "model.cpu_gemm"));
  auto forward = [](frugal::BertForQuestionAnsweringImpl& n, const frugal::Batch& b) {
    return n.forward(b.input, b.extra.at("token_type_ids"), b.extra.at("attention_mask"));
  };
  frugal::Model model(
      net.ptr(),
      frugal::LossFn<frugal::BertForQuestionAnsweringImpl>([forward](frugal::BertForQuestionAnsweringImpl& n, const frugal::Batch& b) {
        auto [start_logits, end_logits] = forward(n, b);
        return frugal::question_answering_loss(start_logits, end_logits, b.target.select(1, 0), b.target.select(1, 1));
      }),
      frugal::MetricsFn<frugal::BertForQuestionAnsweringImpl>([forward](frugal::BertForQuestionAnsweringImpl& n, const frugal::Batch& b) {
        auto [start_logits, end_logits] = forward(n, b);
        const torch::Tensor starts = b.target.select(1, 0), ends = b.target.select(1, 1);
        return frugal::BatchMetrics{
            {"loss", frugal::question_answering_loss(start_logits, end_logits, starts, ends)},
            {"span_accuracy", (start_logits.argmax(1).eq(starts) & end_logits.argmax(1).eq(ends)).to(torch::kFloat32).mean()}};
      }));
  frugal::preemption::stop_if_requested("loading the model");
  frugal::Trainer trainer(model, [o, states = options.optimizer_states](torch::nn::Module& module) { return make_adamw(module, o, states); }, train, options.trainer,
                          options.data);
  if (dev) trainer.set_validation_data(dev);
  auto schedule = [&] {
    const int64_t total = options.trainer.max_steps() > 0 ? options.trainer.max_steps()
                                                          : options.trainer.max_epochs() * frugal::optimizer_steps_per_epoch(trainer, options);
    const auto warmup = static_cast<int64_t>(o.warmup_fraction * static_cast<double>(total));
    trainer.set_lr_schedule(frugal::lr::linear_warmup_decay(warmup, std::max<int64_t>(total, warmup)));
  };
  if (cli.smoke_test_only) {
    schedule();
    return frugal::run_smoke_test_only(trainer, options.smoke_test);
  }
  // MFU and tokens/s count the tokens computed: every window is max_seq_length long, or
  // unpadded only its real tokens (the mean over the training windows, drawn uniformly). The
  // automatic batch size probes with the longest window.
  const int64_t seq = s.features.max_seq_length;
  const torch::Tensor lengths = train->features().attention_mask.sum(1);
  const int64_t longest = lengths.argmax().item<int64_t>();
  const double mean_length = lengths.to(torch::kDouble).mean().item<double>();
  double flops = 3 * net->config().forward_flops(seq), tokens = static_cast<double>(seq);
  if (m.unpad) {
    flops = 0;
    const auto length = lengths.accessor<int64_t, 1>();
    for (int64_t i = 0; i < length.size(0); ++i) flops += 3 * net->config().forward_flops(length[i]) / static_cast<double>(length.size(0));
    tokens = mean_length;
  }
  const double padding = 1.0 - mean_length / static_cast<double>(seq);
  frugal::log::info(c10::str("SQuAD windows: ", static_cast<int>(padding * 100 + 0.5), "% padding",
                             m.unpad ? " (unpadded: not computed)" : " (computed: model.unpad is off)"));
  frugal::log::info(c10::str("float32 linear layers on the CPU through ", frugal::to_string(frugal::cpu_gemm()), " (model.cpu_gemm)"));
  options.throughput.flops_per_sample(flops).tokens_per_sample(tokens);
  frugal::add_policies(trainer, options, config.to_toml(),
                       frugal::repeat_example(train, longest, c10::str(lengths[longest].item<int64_t>(), " of ", seq, " tokens")));
  schedule();
  const frugal::FitResult result = trainer.fit();
  if (trainer.rank() != 0) return 0;
  std::cout << "bert_squad: " << net->config().num_hidden_layers << " layers, hidden " << net->config().hidden_size << ", "
            << result.state.step << " steps in " << result.seconds << " s (" << result.samples_per_second
            << " seq/s), final train loss " << result.train_loss;
  if (dev) {
    auto [start_logits, end_logits] = predict(*net, dev->features(), trainer.device(), options.data.batch_size());
    const auto predictions = frugal::best_answers(dev_examples, dev->features().records(), start_logits, end_logits, s.decode);
    const fs::path out = !s.predictions.empty()             ? fs::path(s.predictions)
                         : options.trainer.run_dir().empty() ? fs::path("predictions.json")
                                                             : fs::path(options.trainer.run_dir()) / "predictions.json";
    std::ofstream(out) << nlohmann::json(predictions).dump(1);
    const frugal::SquadScore score = frugal::squad_score(dev_examples, predictions);
    std::cout << ", dev exact_match " << score.exact_match << " f1 " << score.f1 << " (" << score.questions
              << " questions, predictions in " << out.string() << ")";
  }
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::exit_process(frugal::run_program("frugal_bert_squad", [&] { return run(argc, argv); }));
}
