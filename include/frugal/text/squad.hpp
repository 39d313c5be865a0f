#pragma once
// SQuAD v1.1 for BERT, as NVIDIA's and Google's run_squad do it: the JSON reader, features (a
// question and a window of its context: [CLS] question [SEP] context-window [SEP], windows
// doc_stride tokens apart so a long context is covered several times), answer positions mapped
// through the tokens' character offsets, the n-best post-processing back to a text span of the
// original context, and the official v1.1 EM and F1.
//
//   auto examples = frugal::read_squad("train-v1.1.json");
//   auto features = frugal::make_squad_features(examples, tokenizer, {}, /*training=*/true);
//   auto predictions = frugal::best_answers(examples, features, start_logits, end_logits);
//   frugal::SquadScore score = frugal::squad_score(examples, predictions);  // EM, F1 in %

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "frugal/text/wordpiece.hpp"

namespace frugal {

struct SquadAnswer {
  std::string text;
  int64_t start = 0;  // character offset into the context
};

struct SquadExample {
  std::string id;
  std::string title;
  std::string context;
  std::string question;
  std::vector<SquadAnswer> answers;
};

/// Whether `text` is what `context` holds at character `start` (SQuAD's answer_start counts
/// characters, not bytes). Real files have a few answers that are not: their span is still trained on.
bool answer_matches_context(const std::string& context, const std::string& text, int64_t start);

/// The number of characters (code points) of UTF-8 `text`.
int64_t utf8_length(const std::string& text);

/// Every question of a SQuAD v1.1 file; a DataError names the file and the JSON path
/// ("$.data[0].paragraphs[2].qas[1].answers[0].answer_start: expected an integer").
std::vector<SquadExample> read_squad(const std::filesystem::path& file);

struct SquadFeatureOptions {
  int64_t max_seq_length = 384;
  int64_t doc_stride = 128;
  int64_t max_query_length = 64;
  double progress_every_s = 5;  // a log line on how far preprocessing got, at most this often
};

struct SquadFeature {
  int64_t example = 0;  // index into the examples
  std::vector<int64_t> input_ids, token_type_ids, attention_mask;  // max_seq_length each, padded
  /// Per position: the context characters [begin, end) the token came from; -1 outside the context.
  std::vector<int64_t> char_begin, char_end;
  /// Per position: 1 where this window gives the token the most context on both sides among the
  /// windows holding it (Google's _check_is_max_context); answers start only there. Empty = all.
  std::vector<int64_t> max_context;
  /// Training: the answer's first and last token, or 0 ([CLS]) when this window does not hold it.
  int64_t start_position = 0;
  int64_t end_position = 0;
};

/// Tokenizes and windows every example. With `training`, the first answer's span is mapped to
/// token positions (a window that cuts the answer points at [CLS]).
std::vector<SquadFeature> make_squad_features(const std::vector<SquadExample>& examples, const WordPieceTokenizer& tokenizer,
                                              const SquadFeatureOptions& options, bool training);

struct SquadDecodeOptions {
  int64_t n_best = 20;
  int64_t max_answer_length = 30;  // tokens
};

/// The best span per example over all its windows: the n_best start and end logits of each
/// window, pairs inside the context with start <= end, at most max_answer_length tokens and a
/// start in its max-context window,
/// scored by start + end logit; the text is the original context's characters. `start_logits`
/// and `end_logits` are [features, max_seq_length] on the CPU. Returns id → answer text.
std::map<std::string, std::string> best_answers(const std::vector<SquadExample>& examples,
                                                const std::vector<SquadFeature>& features, const std::vector<float>& start_logits,
                                                const std::vector<float>& end_logits, const SquadDecodeOptions& options = {});

/// The official v1.1 answer normalisation: lower case, ASCII punctuation removed, the articles
/// a/an/the removed, whitespace collapsed.
std::string normalize_squad_answer(const std::string& text);

struct SquadScore {
  double exact_match = 0.0;  // percent
  double f1 = 0.0;           // percent
  int64_t questions = 0;
  int64_t unanswered = 0;    // questions without a prediction (they score 0)
};

/// EM and F1 as the official evaluate-v1.1.py: per question the max over its ground truths,
/// averaged over every question of `examples`.
SquadScore squad_score(const std::vector<SquadExample>& examples, const std::map<std::string, std::string>& predictions);

}  // namespace frugal
