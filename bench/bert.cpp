// BERT example benchmarks (issue 11), ratios against a baseline measured in the same run:
// - train-step: a Frugal Trainer fine-tuning BertForQuestionAnswering on CPU against Hugging Face
//   transformers trained eagerly in Python with the same config, sequence length, batch, AdamW
//   and thread count; 5 alternating rounds, medians (goal: Frugal's time <= 0.8x). With one thread
//   both sides are timed in thread CPU time, which a busy machine does not inflate; with more, in
//   wall time. With PADDING > 0 (the share of padded tokens: 0.54 in SQuAD v1.1's windows of 384)
//   the sequences have real lengths evenly spread around (1 - PADDING) x SEQ; Hugging Face
//   computes them padded, as its run_qa.py does by default, Frugal unpadded (the example's default).
//   Without padding it also times Frugal's step with its linear layers on MKL (torch::linear's
//   library) against oneDNN (Frugal's default on the CPU), and with the CPU memory cache off
//   against on (the default), 5 alternating rounds each;
// - gpu: BERT-large at sequence length 384 on one GPU, fp16 and bf16 against fp32, seq/s; and
//   bf16 on SQuAD-like padding (54%), unpadded against padded;
// - squad-preprocess: SQuAD feature making (384/128 windows) for one question on a 5 MB context
//   against 5 x the time for a 1 MB one: linear in the context is a ratio of about 1 (issue 23
//   measured minutes for 5 MB before the max-context fix).
//
//   build/bench/frugal_bench_bert train-step build/bench/results.jsonl PYTHON [HIDDEN LAYERS HEADS SEQ BATCH STEPS THREADS PADDING]
//   build/bench/frugal_bench_bert gpu build/bench/results.jsonl [BATCH STEPS]
//   build/bench/frugal_bench_bert squad-preprocess build/bench/results.jsonl

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "bench_result.hpp"
#include "bert_workload.hpp"
#include "interleaved.hpp"
#include "support/source_dir.hpp"
#include "frugal/frugal.hpp"
#include "python_baseline.hpp"

using frugal::bench::Result;

namespace {

// Real lengths evenly spread from about 0 to 2 (1 - padding) x seq (mean (1 - padding) x seq), each in [1, seq].
std::vector<int64_t> spread_lengths(int64_t batch, int64_t seq, double padding) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < batch; ++i) {
    const double length = (static_cast<double>(i) + 0.5) / static_cast<double>(batch) * 2 * (1 - padding) * static_cast<double>(seq);
    lengths.push_back(std::clamp<int64_t>(std::llround(length), 1, seq));
  }
  return lengths;
}


// Seconds of a fit of `steps` steps: thread CPU time with one LibTorch thread, else wall time.
double fit_seconds(const frugal::BertConfig& config, int64_t seq, const std::vector<int64_t>& lengths, int64_t steps, const std::string& device,
                   frugal::Precision precision, bool unpad, bool cpu_memory_cache = true) {
  torch::manual_seed(0);
  frugal::BertForQuestionAnswering net(config);
  net->bert->set_unpad(unpad);
  const auto batch = static_cast<int64_t>(lengths.size());
  frugal::Trainer trainer(
      frugal::bench::qa_model(net), frugal::bench::qa_adamw, std::make_shared<frugal::bench::RandomTokens>(config.vocab_size, seq, lengths),
      frugal::TrainerOptions()
          .max_steps(steps)
          .max_epochs(steps)
          .device(device)
          .run_dir("")
          .log_every_n_steps(steps)
          .cpu_memory_cache(cpu_memory_cache),
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
               int64_t batch, int64_t steps, int64_t thread_count, double padding) {
  if (thread_count > 0) torch::set_num_threads(static_cast<int>(thread_count));
  if (padding < 0 || padding >= 1) throw std::invalid_argument(c10::str("PADDING must be in [0, 1), got ", padding));
  const int threads = static_cast<int>(torch::get_num_threads());
  const frugal::BertConfig config = frugal::bench::bert_config(hidden, layers, heads);
  const std::vector<int64_t> lengths = padding > 0 ? spread_lengths(batch, seq, padding) : std::vector<int64_t>(batch, seq);
  std::string length_list;
  for (const int64_t length : lengths) length_list += c10::str(length_list.empty() ? "" : ",", length);
  const std::string command = c10::str(python, " ", frugal::testing::source_dir(), "/bench/bert_train_step.py ", hidden, " ", layers, " ", heads,
                                       " ", seq, " ", batch, " ", steps, " ", threads, " ", length_list);
  auto warm = [&](bool cpu_memory_cache = true) {  // steps warm steps: a (1 + steps)-step fit less a 1-step fit
    return fit_seconds(config, seq, lengths, steps + 1, "cpu", frugal::Precision::fp32, true, cpu_memory_cache) -
           fit_seconds(config, seq, lengths, 1, "cpu", frugal::Precision::fp32, true, cpu_memory_cache);
  };
  const auto [ours, theirs] = frugal::bench::alternate(5, warm, [&] { return frugal::bench::python_seconds(command); }, "transformers");
  const double sequences = static_cast<double>(batch * steps);
  const std::string padded = padding > 0 ? c10::str(" padding ", std::lround(100 * padding), "% (Frugal unpadded vs transformers padded)")
                                          : " (Frugal Trainer vs transformers eager)";
  const Result r{c10::str("bert train step CPU hidden ", hidden, " layers ", layers, " seq ", seq, " batch ", batch, " ", threads,
                          " threads", padded),
                 sequences / ours, "seq/s", sequences / theirs,
                 c10::str("build/bench/frugal_bench_bert train-step build/bench/results.jsonl ", python, " ", hidden, " ", layers, " ",
                          heads, " ", seq, " ", batch, " ", steps, " ", threads, " ", padding)};
  frugal::bench::append(results, r);
  std::printf("%s: %.2f seq/s vs %.2f (time ratio %.3f; goal <= 0.8)\n", r.name.c_str(), r.value, r.baseline, 1.0 / r.ratio());
  if (padding == 0) {  // how much of it is the linear layers' library: the same Frugal step with MKL's multiplies
    const frugal::CpuGemm chosen = frugal::cpu_gemm();
    auto with = [&](frugal::CpuGemm gemm) {
      frugal::set_cpu_gemm(gemm);
      return warm();
    };
    const frugal::bench::Comparison c = frugal::bench::compare_interleaved(
        5, [&] { return with(frugal::CpuGemm::mkl); }, [&] { return with(frugal::CpuGemm::onednn); });
    frugal::set_cpu_gemm(chosen);
    const Result g{c10::str("bert train step CPU hidden ", hidden, " layers ", layers, " seq ", seq, " batch ", batch, " ", threads,
                            " threads: linear layers on oneDNN vs MKL (both Frugal)"),
                   sequences / c.candidate, "seq/s", sequences / c.baseline, r.command};
    frugal::bench::append(results, g);
    std::printf("%s: %.2f seq/s vs %.2f (time ratio %.3f)\n", g.name.c_str(), g.value, g.baseline, c.ratio);
    // And the CPU memory cache (trainer.cpu_memory_cache): the same Frugal step with it off.
    const frugal::bench::Comparison m = frugal::bench::compare_interleaved(5, [&] { return warm(false); }, [&] { return warm(true); });
    const Result k{c10::str("bert train step CPU hidden ", hidden, " layers ", layers, " seq ", seq, " batch ", batch, " ", threads,
                            " threads: CPU memory cache on vs off (both Frugal)"),
                   sequences / m.candidate, "seq/s", sequences / m.baseline, r.command};
    frugal::bench::append(results, k);
    std::printf("%s: %.2f seq/s vs %.2f (time ratio %.3f)\n", k.name.c_str(), k.value, k.baseline, m.ratio);
  }
  return 0;
}

int gpu(const std::string& results, int64_t batch, int64_t steps) {
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  const frugal::BertConfig large = frugal::BertConfig::preset("large");
  auto seq_per_s = [&](frugal::Precision p, const std::vector<int64_t>& lengths, bool unpad) {
    // A warm-up fit first: each precision's first steps choose kernels and grow the allocator's pool
    // (2.5 s of BERT-large on an H200), which would otherwise land in the timed steps.
    fit_seconds(large, 384, lengths, 3, "cuda", p, unpad);
    const double t = fit_seconds(large, 384, lengths, steps + 3, "cuda", p, unpad) - fit_seconds(large, 384, lengths, 3, "cuda", p, unpad);
    return static_cast<double>(batch * steps) / t;
  };
  const std::string command = c10::str("build/bench/frugal_bench_bert gpu build/bench/results.jsonl ", batch, " ", steps);
  const std::vector<int64_t> full(batch, 384);
  const double fp32 = seq_per_s(frugal::Precision::fp32, full, false);
  for (const auto& [name, p] : {std::pair{"fp16", frugal::Precision::fp16}, std::pair{"bf16", frugal::Precision::bf16}}) {
    const Result r{c10::str("bert-large seq 384 batch ", batch, " ", name, " vs fp32 on ", static_cast<int>(torch::cuda::device_count()), " GPU(s)"),
                   seq_per_s(p, full, false), "seq/s", fp32, command};
    frugal::bench::append(results, r);
    std::printf("%s: %.1f seq/s vs fp32 %.1f (x%.2f; goal >= 500 seq/s on an H200)\n", r.name.c_str(), r.value, r.baseline, r.ratio());
  }
  const std::vector<int64_t> squad = spread_lengths(batch, 384, 0.54);  // SQuAD v1.1's share of padding at 384
  const Result r{c10::str("bert-large seq 384 batch ", batch, " bf16 54% padding: unpadded vs padded"),
                 seq_per_s(frugal::Precision::bf16, squad, true), "seq/s", seq_per_s(frugal::Precision::bf16, squad, false), command};
  frugal::bench::append(results, r);
  std::printf("%s: %.1f seq/s vs %.1f (x%.2f)\n", r.name.c_str(), r.value, r.baseline, r.ratio());
  return 0;
}

}  // namespace

// Seconds to make the features of one question on a generated context of about `bytes`.
double squad_feature_seconds(const frugal::WordPieceTokenizer& tokenizer, int64_t bytes) {
  std::string context;
  const std::vector<std::string> words{"the", "river", "flows", "north", "past", "old", "mills", "and", "quiet", "towns"};
  for (size_t i = 0; static_cast<int64_t>(context.size()) < bytes; ++i) context += words[(i * 7 + i / 10) % words.size()] + (i % 17 == 16 ? ". " : " ");
  const frugal::SquadExample example{"q", "", context, "where does the river flow", {{"north", static_cast<int64_t>(context.find("north"))}}};
  const auto start = std::chrono::steady_clock::now();
  const auto features = frugal::make_squad_features({example}, tokenizer, frugal::SquadFeatureOptions{}, /*training=*/true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (features.empty()) throw std::runtime_error("no features");
  return seconds;
}

int squad_preprocess(const std::string& results) {
  std::vector<std::string> vocab{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "the", "river", "flows", "north", "past", "old",
                                 "mills", "and", "quiet", "towns", "where", "does", "flow"};
  const frugal::WordPieceTokenizer tokenizer(vocab);
  squad_feature_seconds(tokenizer, 100'000);  // warm-up
  const double one = squad_feature_seconds(tokenizer, 1'000'000), five = squad_feature_seconds(tokenizer, 5'000'000);
  std::printf("SQuAD features of one question: 1 MB context %.2f s, 5 MB %.2f s (%.2fx of linear)\n", one, five, five / (5 * one));
  frugal::bench::append(results, {"squad_features_5mb_context", five, "s", 5 * one,
                                  "build/bench/frugal_bench_bert squad-preprocess build/bench/results.jsonl"});
  return 0;
}

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  auto arg = [&](size_t i, int64_t fallback) { return a.size() > i ? std::stoll(a[i]) : fallback; };
  try {
    if (a.size() >= 3 && a[0] == "train-step") {
      return train_step(a[1], a[2], arg(3, 256), arg(4, 4), arg(5, 4), arg(6, 128), arg(7, 16), arg(8, 5), arg(9, 0),
                        a.size() > 10 ? std::stod(a[10]) : 0.0);
    }
    if (a.size() >= 2 && a[0] == "gpu") return gpu(a[1], arg(2, 32), arg(3, 20));
    if (a.size() >= 2 && a[0] == "squad-preprocess") return squad_preprocess(a[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_bench_bert: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: frugal_bench_bert train-step RESULTS PYTHON [HIDDEN LAYERS HEADS SEQ BATCH STEPS THREADS PADDING] | gpu RESULTS [BATCH STEPS] | squad-preprocess RESULTS\n");
  return 2;
}
