// BERT example benchmarks (issue 11), ratios against a baseline measured in the same run:
// - train-step: a Frugal Trainer fine-tuning BertForQuestionAnswering on CPU against Hugging Face
//   transformers trained eagerly in Python with the same config, sequence length, batch, AdamW
//   and thread count; 5 alternating rounds, medians (goal: Frugal's time <= 0.8x). With one thread
//   both sides are timed in thread CPU time, which a busy machine does not inflate; with more, in
//   wall time;
// - gpu: BERT-large at sequence length 384 on one GPU, fp16 and bf16 against fp32, seq/s.
//
//   build/bench/frugal_bench_bert train-step build/bench/results.jsonl PYTHON [HIDDEN LAYERS HEADS SEQ BATCH STEPS THREADS]
//   build/bench/frugal_bench_bert gpu build/bench/results.jsonl [BATCH STEPS]

#include <torch/torch.h>

#include <cstdio>

#include "bench_result.hpp"
#include "frugal/frugal.hpp"
#include "python_baseline.hpp"

using frugal::bench::Result;

namespace {

// One fixed batch of random token ids, served for every index (the model is what is measured).
class RandomTokens : public frugal::Dataset {
 public:
  RandomTokens(int64_t size, int64_t vocab, int64_t seq) : size_(size) {
    torch::Generator gen = at::detail::createCPUGenerator(0);
    ids_ = torch::randint(1, vocab, {size, seq}, gen, torch::kInt64);
    positions_ = torch::randint(0, seq, {size, 2}, gen, torch::kInt64);
  }
  int64_t size() const override { return size_; }
  frugal::Batch get_batch(const std::vector<int64_t>& indices) const override {
    const torch::Tensor at = torch::tensor(indices, torch::kInt64);
    const torch::Tensor ids = ids_.index_select(0, at);
    return {ids, positions_.index_select(0, at), {{"token_type_ids", torch::zeros_like(ids)}, {"attention_mask", torch::ones_like(ids)}}};
  }

 private:
  int64_t size_;
  torch::Tensor ids_, positions_;
};

frugal::BertConfig config_of(int64_t hidden, int64_t layers, int64_t heads) {
  frugal::BertConfig c;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.intermediate_size = 4 * hidden;
  return c;
}

// Seconds of a fit of `steps` steps: thread CPU time with one LibTorch thread, else wall time.
double fit_seconds(const frugal::BertConfig& config, int64_t seq, int64_t batch, int64_t steps, const std::string& device,
                   frugal::Precision precision) {
  torch::manual_seed(0);
  frugal::BertForQuestionAnswering net(config);
  frugal::Model model(net.ptr(), frugal::LossFn<frugal::BertForQuestionAnsweringImpl>([](frugal::BertForQuestionAnsweringImpl& n,
                                                                                         const frugal::Batch& b) {
                        auto [s, e] = n.forward(b.input, b.extra.at("token_type_ids"), b.extra.at("attention_mask"));
                        return frugal::question_answering_loss(s, e, b.target.select(1, 0), b.target.select(1, 1));
                      }));
  frugal::Trainer trainer(
      model,
      [](torch::nn::Module& m) {
        const auto o = torch::optim::AdamWOptions(3e-5).eps(1e-6).weight_decay(0.01);
        return std::make_unique<frugal::FusedAdamW>(frugal::weight_decay_groups(m, o, frugal::is_bias_or_layer_norm), o);
      },
      std::make_shared<RandomTokens>(batch, config.vocab_size, seq),
      frugal::TrainerOptions().max_steps(steps).max_epochs(steps).device(device).run_dir("").log_every_n_steps(steps),
      frugal::DataLoaderOptions().batch_size(batch).shuffle(false));
  if (precision != frugal::Precision::fp32) {
    trainer.add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(frugal::MixedPrecisionOptions().mode(precision)));
  }
  const bool one_thread = torch::get_num_threads() == 1 && device == "cpu";
  const double cpu_start = frugal::bench::thread_cpu_seconds();
  const double wall = trainer.fit().seconds;
  return one_thread ? frugal::bench::thread_cpu_seconds() - cpu_start : wall;
}

int train_step(const std::string& results, const std::string& python, int64_t hidden, int64_t layers, int64_t heads, int64_t seq,
               int64_t batch, int64_t steps, int64_t thread_count) {
  if (thread_count > 0) torch::set_num_threads(static_cast<int>(thread_count));
  const int threads = static_cast<int>(torch::get_num_threads());
  const frugal::BertConfig config = config_of(hidden, layers, heads);
  const std::string command = c10::str(python, " ", FRUGAL_SOURCE_DIR, "/bench/bert_train_step.py ", hidden, " ", layers, " ", heads,
                                       " ", seq, " ", batch, " ", steps, " ", threads);
  auto warm = [&] {  // steps warm steps: a (1 + steps)-step fit less a 1-step fit
    return fit_seconds(config, seq, batch, steps + 1, "cpu", frugal::Precision::fp32) -
           fit_seconds(config, seq, batch, 1, "cpu", frugal::Precision::fp32);
  };
  const auto [ours, theirs] = frugal::bench::alternate(5, warm, [&] { return frugal::bench::python_seconds(command); }, "transformers");
  const double sequences = static_cast<double>(batch * steps);
  const Result r{c10::str("bert train step CPU hidden ", hidden, " layers ", layers, " seq ", seq, " batch ", batch, " ", threads,
                          " threads (Frugal Trainer vs transformers eager)"),
                 sequences / ours, "seq/s", sequences / theirs,
                 c10::str("build/bench/frugal_bench_bert train-step build/bench/results.jsonl ", python, " ", hidden, " ", layers, " ",
                          heads, " ", seq, " ", batch, " ", steps, " ", threads)};
  frugal::bench::append(results, r);
  std::printf("%s: %.2f seq/s vs %.2f (time ratio %.3f; goal <= 0.8)\n", r.name.c_str(), r.value, r.baseline, 1.0 / r.ratio());
  return 0;
}

int gpu(const std::string& results, int64_t batch, int64_t steps) {
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  const frugal::BertConfig large = frugal::BertConfig::preset("large");
  auto seq_per_s = [&](frugal::Precision p) {
    const double t = fit_seconds(large, 384, batch, steps + 3, "cuda", p) - fit_seconds(large, 384, batch, 3, "cuda", p);
    return static_cast<double>(batch * steps) / t;
  };
  const double fp32 = seq_per_s(frugal::Precision::fp32);
  for (const auto& [name, p] : {std::pair{"fp16", frugal::Precision::fp16}, std::pair{"bf16", frugal::Precision::bf16}}) {
    const Result r{c10::str("bert-large seq 384 batch ", batch, " ", name, " vs fp32 on ", torch::cuda::device_count(), " GPU(s)"),
                   seq_per_s(p), "seq/s", fp32, c10::str("build/bench/frugal_bench_bert gpu build/bench/results.jsonl ", batch, " ", steps)};
    frugal::bench::append(results, r);
    std::printf("%s: %.1f seq/s vs fp32 %.1f (x%.2f; goal >= 500 seq/s on an H200)\n", r.name.c_str(), r.value, r.baseline, r.ratio());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  auto arg = [&](size_t i, int64_t fallback) { return a.size() > i ? std::stoll(a[i]) : fallback; };
  try {
    if (a.size() >= 3 && a[0] == "train-step") {
      return train_step(a[1], a[2], arg(3, 256), arg(4, 4), arg(5, 4), arg(6, 128), arg(7, 16), arg(8, 5), arg(9, 0));
    }
    if (a.size() >= 2 && a[0] == "gpu") return gpu(a[1], arg(2, 32), arg(3, 20));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_bench_bert: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: frugal_bench_bert train-step RESULTS PYTHON [HIDDEN LAYERS HEADS SEQ BATCH STEPS THREADS] | gpu RESULTS [BATCH STEPS]\n");
  return 2;
}
