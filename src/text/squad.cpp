#include "frugal/text/squad.hpp"

#include <c10/util/StringUtil.h>
#include <utf8proc.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "frugal/base/preemption.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace {


using Json = nlohmann::json;

const Json& member(const Json& object, const char* key, bool (Json::*is)() const, const char* type, const std::string& file,
                   const std::string& path) {
  if (!object.is_object() || !object.contains(key)) throw DataError(file, -1, c10::str(path, ".", key, ": missing"));
  const Json& value = object.at(key);
  if (!(value.*is)()) throw DataError(file, -1, c10::str(path, ".", key, ": expected ", type, ", got ", value.type_name()));
  return value;
}

// Byte offset of every code point of `text`, plus its size: characters → bytes.
std::vector<size_t> char_starts(const std::string& text) {
  std::vector<size_t> starts;
  for (size_t at = 0; at < text.size(); ++at) {
    if ((static_cast<unsigned char>(text[at]) & 0xC0) != 0x80) starts.push_back(at);
  }
  starts.push_back(text.size());
  return starts;
}

int64_t char_count(const std::string& text) { return static_cast<int64_t>(char_starts(text).size()) - 1; }

std::vector<utf8proc_int32_t> code_points(const std::string& text) {
  std::vector<utf8proc_int32_t> out;
  for (size_t at = 0; at < text.size();) {
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                    static_cast<utf8proc_ssize_t>(text.size() - at), &cp);
    if (n <= 0) {  // not UTF-8: keep the byte as a Latin-1 character rather than fail scoring
      out.push_back(static_cast<unsigned char>(text[at++]));
      continue;
    }
    out.push_back(cp);
    at += static_cast<size_t>(n);
  }
  return out;
}

std::string to_utf8(const std::vector<utf8proc_int32_t>& cps) {
  std::string out;
  for (const auto cp : cps) {
    utf8proc_uint8_t buffer[4];
    out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(utf8proc_encode_char(cp, buffer)));
  }
  return out;
}

// Python's \w: letters, numbers (str.isalnum) and the underscore.
bool is_word_char(utf8proc_int32_t cp) {
  if (cp == '_') return true;
  const auto c = utf8proc_category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

bool is_space(utf8proc_int32_t cp) {
  if (cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85) return true;
  const auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

std::vector<std::string> split_whitespace(const std::vector<utf8proc_int32_t>& cps) {
  std::vector<std::string> words;
  std::vector<utf8proc_int32_t> word;
  for (size_t i = 0; i <= cps.size(); ++i) {
    if (i == cps.size() || is_space(cps[i])) {
      if (!word.empty()) words.push_back(to_utf8(word));
      word.clear();
    } else {
      word.push_back(cps[i]);
    }
  }
  return words;
}

std::vector<std::string> normalized_tokens(const std::string& text) {
  const std::string normalized = normalize_squad_answer(text);
  return split_whitespace(code_points(normalized));
}

double f1_of(const std::string& prediction, const std::string& truth) {
  std::vector<std::string> p = normalized_tokens(prediction), t = normalized_tokens(truth);
  std::sort(p.begin(), p.end());
  std::sort(t.begin(), t.end());
  std::vector<std::string> common;
  std::set_intersection(p.begin(), p.end(), t.begin(), t.end(), std::back_inserter(common));  // multiset: Counter's &
  if (common.empty()) return 0.0;
  const double precision = static_cast<double>(common.size()) / static_cast<double>(p.size());
  const double recall = static_cast<double>(common.size()) / static_cast<double>(t.size());
  return 2 * precision * recall / (precision + recall);
}

}  // namespace

bool answer_matches_context(const std::string& context, const std::string& text, int64_t start) {
  const std::vector<utf8proc_int32_t> chars = code_points(context), said = code_points(text);
  const bool inside = start >= 0 && start <= static_cast<int64_t>(chars.size()) - static_cast<int64_t>(said.size());
  return inside && std::equal(said.begin(), said.end(), chars.begin() + start);
}

int64_t utf8_length(const std::string& text) { return char_count(text); }

std::vector<SquadExample> read_squad(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path);
  if (!in) throw DataError(file, -1, "cannot open");
  Json json;
  try {
    json = Json::parse(in);
  } catch (const Json::parse_error& e) {
    throw DataError(file, static_cast<int64_t>(e.byte) - 1, c10::str("not valid JSON: ", e.what()));
  } catch (const Json::exception& e) {  // a number too large for any type (out_of_range.406) and the like
    throw DataError(file, -1, c10::str("not valid JSON: ", e.what()));
  }
  std::vector<SquadExample> examples;
  const Json& data = member(json, "data", &Json::is_array, "array", file, "$");
  for (size_t d = 0; d < data.size(); ++d) {
    const std::string dp = c10::str("$.data[", d, "]");
    const std::string title = data[d].is_object() && data[d].contains("title") && data[d]["title"].is_string()
                                  ? data[d]["title"].get<std::string>()
                                  : "";
    const Json& paragraphs = member(data[d], "paragraphs", &Json::is_array, "array", file, dp);
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string pp = c10::str(dp, ".paragraphs[", p, "]");
      const std::string context = member(paragraphs[p], "context", &Json::is_string, "string", file, pp).get<std::string>();
      const int64_t context_chars = char_count(context);
      const Json& qas = member(paragraphs[p], "qas", &Json::is_array, "array", file, pp);
      for (size_t q = 0; q < qas.size(); ++q) {
        const std::string qp = c10::str(pp, ".qas[", q, "]");
        SquadExample example{member(qas[q], "id", &Json::is_string, "string", file, qp).get<std::string>(), title, context,
                             member(qas[q], "question", &Json::is_string, "string", file, qp).get<std::string>(), {}};
        const Json& answers = member(qas[q], "answers", &Json::is_array, "array", file, qp);
        for (size_t a = 0; a < answers.size(); ++a) {
          const std::string ap = c10::str(qp, ".answers[", a, "]");
          SquadAnswer answer{member(answers[a], "text", &Json::is_string, "string", file, ap).get<std::string>(),
                             member(answers[a], "answer_start", &Json::is_number_integer, "an integer", file, ap).get<int64_t>()};
          // Compared without adding: a start near INT64_MAX would overflow the sum and pass.
          if (answer.start < 0 || answer.start > context_chars - char_count(answer.text)) {
            throw DataError(file, -1, c10::str(ap, ".answer_start: ", answer.start, " puts the answer outside its ",
                                               context_chars, "-character context"));
          }
          example.answers.push_back(std::move(answer));
        }
        examples.push_back(std::move(example));
      }
    }
  }
  if (examples.empty()) {
    throw DataError(file, -1, "no questions: the file's articles hold no paragraph with a question (an empty data set)");
  }
  return examples;
}

std::vector<SquadFeature> make_squad_features(const std::vector<SquadExample>& examples, const WordPieceTokenizer& tokenizer,
                                              const SquadFeatureOptions& options, bool training) {
  const int64_t cls = tokenizer.id_of("[CLS]"), sep = tokenizer.id_of("[SEP]"), pad = tokenizer.id_of("[PAD]");
  std::vector<SquadFeature> features;
  int64_t without_answer = 0, text_differs = 0;
  // Full SQuAD takes a while on one core: say how far it got every few seconds, and let a
  // pre-emption notice (when the program listens for one) stop it between questions.
  const auto started = std::chrono::steady_clock::now();
  auto last_report = started;
  for (size_t e = 0; e < examples.size(); ++e) {
    if (e % 64 == 0 && e > 0) {
      preemption::stop_if_requested("preparing the SQuAD features");
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report >= std::chrono::duration<double>(options.progress_every_s)) {
        last_report = now;
        const double seconds = std::chrono::duration<double>(now - started).count();
        const double left = seconds * static_cast<double>(examples.size() - e) / static_cast<double>(e);
        log::info(c10::str("SQuAD features: ", e, " of ", examples.size(), " questions (", 100 * e / examples.size(), "%), ",
                           features.size(), " windows, ", static_cast<int64_t>(seconds), " s, about ", static_cast<int64_t>(left + 0.5),
                           " s left"));
      }
    }
    const SquadExample& example = examples[e];
    std::vector<WordPieceToken> query = tokenizer.tokenize(example.question);
    if (static_cast<int64_t>(query.size()) > options.max_query_length) query.resize(static_cast<size_t>(options.max_query_length));
    const std::vector<WordPieceToken> context = tokenizer.tokenize(example.context);
    const auto n = static_cast<int64_t>(context.size());
    const int64_t max_doc = options.max_seq_length - static_cast<int64_t>(query.size()) - 3;
    if (max_doc < 1) {
      throw OptionError("max_seq_length", c10::str("max_seq_length ", options.max_seq_length, " leaves no room for the context after a ",
                                                   query.size(), "-token question"));
    }
    // The answer's tokens: the first ending after its start, the last beginning before its end.
    int64_t answer_first = -1, answer_last = -1;
    if (training && example.answers.empty()) ++without_answer;
    if (training && !example.answers.empty()) {
      const int64_t begin = example.answers[0].start, end = begin + char_count(example.answers[0].text);
      if (!answer_matches_context(example.context, example.answers[0].text, begin)) ++text_differs;
      for (int64_t t = 0; t < n; ++t) {
        if (answer_first < 0 && context[static_cast<size_t>(t)].end > begin) answer_first = t;
        if (context[static_cast<size_t>(t)].begin < end) answer_last = t;
      }
    }
    std::vector<std::pair<int64_t, int64_t>> windows;  // (first token, length)
    for (int64_t start = 0;;) {
      const int64_t length = std::min(max_doc, n - start);
      windows.emplace_back(start, length);
      if (start + length >= n) break;
      start += std::min(length, options.doc_stride);
    }
    // The window where a token has the most context: min(left, right) + 0.01 x window length.
    // Windows come in order of start and are at most max_doc long, so only those starting within
    // max_doc before the token can hold it (scanning all of them made long contexts quadratic).
    auto max_context_window = [&windows, max_doc](int64_t token) {
      double best = -1;
      size_t best_window = 0;
      const auto first = std::lower_bound(windows.begin(), windows.end(), token - max_doc + 1,
                                          [](const std::pair<int64_t, int64_t>& w, int64_t s) { return w.first < s; });
      for (auto w = static_cast<size_t>(first - windows.begin()); w < windows.size() && windows[w].first <= token; ++w) {
        const auto [start, length] = windows[w];
        if (token < start || token >= start + length) continue;
        const double score = static_cast<double>(std::min(token - start, start + length - 1 - token)) + 0.01 * static_cast<double>(length);
        if (score > best) {
          best = score;
          best_window = w;
        }
      }
      return best_window;
    };
    for (size_t w = 0; w < windows.size(); ++w) {
      const auto [start, length] = windows[w];
      SquadFeature f;
      f.example = static_cast<int64_t>(e);
      auto push = [&f](int64_t id, int64_t type, int64_t begin, int64_t end, int64_t max_context = 0) {
        f.input_ids.push_back(id);
        f.token_type_ids.push_back(type);
        f.attention_mask.push_back(1);
        f.char_begin.push_back(begin);
        f.char_end.push_back(end);
        f.max_context.push_back(max_context);
      };
      push(cls, 0, -1, -1);
      for (const auto& q : query) push(q.id, 0, -1, -1);
      push(sep, 0, -1, -1);
      const auto offset = static_cast<int64_t>(f.input_ids.size()) - start;  // context token t sits at t + offset
      for (int64_t t = start; t < start + length; ++t) {
        const auto& c = context[static_cast<size_t>(t)];
        push(c.id, 1, c.begin, c.end, max_context_window(t) == w ? 1 : 0);
      }
      push(sep, 1, -1, -1);
      while (static_cast<int64_t>(f.input_ids.size()) < options.max_seq_length) {
        push(pad, 0, -1, -1);
        f.attention_mask.back() = 0;
      }
      if (answer_first >= start && answer_last >= answer_first && answer_last < start + length) {
        f.start_position = answer_first + offset;
        f.end_position = answer_last + offset;
      }
      features.push_back(std::move(f));
    }
  }
  // Hugging Face's run_qa.py does the same with both, silently: Frugal says so.
  if (without_answer > 0) {
    log::warn(c10::str("SQuAD: ", without_answer, " of ", examples.size(), " training questions have no answer: their features ",
                       "point at [CLS] (no answer in the window), as Hugging Face's run_qa.py trains them"));
  }
  if (text_differs > 0) {
    log::warn(c10::str("SQuAD: ", text_differs, " of ", examples.size(), " training answers differ from the context at their ",
                       "answer_start: the span at answer_start is trained on, as Hugging Face's run_qa.py does"));
  }
  return features;
}

std::map<std::string, std::string> best_answers(const std::vector<SquadExample>& examples,
                                                const std::vector<SquadFeature>& features, const std::vector<float>& start_logits,
                                                const std::vector<float>& end_logits, const SquadDecodeOptions& options) {
  struct Best {
    double score = -1e30;
    int64_t begin = -1, end = -1;
  };
  std::vector<Best> best(examples.size());
  const size_t width = features.empty() ? 0 : features.front().input_ids.size();
  if (start_logits.size() != features.size() * width || end_logits.size() != features.size() * width) {
    throw OptionError("start_logits", c10::str("best_answers: expected ", features.size(), " x ", width, " logits, got ",
                                               start_logits.size(), " and ", end_logits.size()));
  }
  auto top = [&](const float* row) {
    std::vector<int64_t> order(width);
    std::iota(order.begin(), order.end(), 0);
    const auto k = static_cast<size_t>(std::min<int64_t>(options.n_best, static_cast<int64_t>(width)));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [row](int64_t a, int64_t b) { return row[a] > row[b]; });
    order.resize(k);
    return order;
  };
  for (size_t i = 0; i < features.size(); ++i) {
    const SquadFeature& f = features[i];
    const float* s = start_logits.data() + i * width;
    const float* e = end_logits.data() + i * width;
    Best& b = best[static_cast<size_t>(f.example)];
    for (const int64_t si : top(s)) {
      for (const int64_t ei : top(e)) {
        const auto su = static_cast<size_t>(si), eu = static_cast<size_t>(ei);
        if (f.char_begin[su] < 0 || f.char_begin[eu] < 0 || ei < si || ei - si + 1 > options.max_answer_length) continue;
        if (!f.max_context.empty() && f.max_context[su] == 0) continue;
        const double score = static_cast<double>(s[si]) + static_cast<double>(e[ei]);
        if (score > b.score) b = {score, f.char_begin[su], f.char_end[eu]};
      }
    }
  }
  std::map<std::string, std::string> out;
  for (size_t x = 0; x < examples.size(); ++x) {
    std::string text;
    if (best[x].begin >= 0) {
      const std::vector<size_t> starts = char_starts(examples[x].context);
      text = examples[x].context.substr(starts[static_cast<size_t>(best[x].begin)],
                                        starts[static_cast<size_t>(best[x].end)] - starts[static_cast<size_t>(best[x].begin)]);
    }
    out[examples[x].id] = text;
  }
  return out;
}

namespace {

// Unicode's Cased and Case_Ignorable properties, as Python's str.lower() tests them for the final sigma.
bool is_cased(utf8proc_int32_t cp) {
  const auto category = utf8proc_category(cp);
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT ||
         utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
}

bool is_case_ignorable(utf8proc_int32_t cp) {
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_SK:
      return true;
    default:  // Word_Break MidLetter, MidNumLet and Single_Quote
      return cp == '\'' || cp == '.' || cp == ':' || cp == 0xB7 || cp == 0x387 || cp == 0x5F4 || cp == 0x2018 || cp == 0x2019 ||
             cp == 0x2024 || cp == 0x2027 || cp == 0xFE13 || cp == 0xFE52 || cp == 0xFE55 || cp == 0xFF07 || cp == 0xFF0E ||
             cp == 0xFF1A;
  }
}

// Python's str.lower(), which the official SQuAD script uses: the simple mapping plus the two
// special cases Python applies (SpecialCasing.txt): U+0130 becomes "i" + U+0307, and a capital
// sigma ends a word as U+03C2 (Final_Sigma: a cased letter before it, none after it, skipping
// case-ignorable ones).
std::vector<utf8proc_int32_t> python_lower(const std::vector<utf8proc_int32_t>& in) {
  std::vector<utf8proc_int32_t> out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const utf8proc_int32_t cp = in[i];
    if (cp == 0x130) {
      out.push_back('i');
      out.push_back(0x307);
    } else if (cp == 0x3A3) {
      ptrdiff_t j = static_cast<ptrdiff_t>(i) - 1;
      while (j >= 0 && is_case_ignorable(in[static_cast<size_t>(j)])) --j;
      bool final = j >= 0 && is_cased(in[static_cast<size_t>(j)]);
      if (final) {
        size_t k = i + 1;
        while (k < in.size() && is_case_ignorable(in[k])) ++k;
        final = k == in.size() || !is_cased(in[k]);
      }
      out.push_back(final ? 0x3C2 : 0x3C3);
    } else {
      out.push_back(utf8proc_tolower(cp));
    }
  }
  return out;
}

}  // namespace

std::string normalize_squad_answer(const std::string& text) {
  static const std::string kPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";  // Python's string.punctuation
  std::vector<utf8proc_int32_t> cps;
  for (const auto lower : python_lower(code_points(text))) {
    if (lower < 128 && kPunctuation.find(static_cast<char>(lower)) != std::string::npos) continue;
    cps.push_back(lower);
  }
  // re.sub(r"\b(a|an|the)\b", " ", text): whole runs of word characters equal to an article.
  std::vector<utf8proc_int32_t> kept;
  for (size_t i = 0; i < cps.size();) {
    if (!is_word_char(cps[i])) {
      kept.push_back(cps[i++]);
      continue;
    }
    size_t j = i;
    while (j < cps.size() && is_word_char(cps[j])) ++j;
    const std::string word = to_utf8({cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j)});
    if (word == "a" || word == "an" || word == "the") {
      kept.push_back(' ');
    } else {
      kept.insert(kept.end(), cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j));
    }
    i = j;
  }
  const std::vector<std::string> words = split_whitespace(kept);
  std::string out;
  for (size_t w = 0; w < words.size(); ++w) {
    if (w > 0) out += ' ';
    out += words[w];
  }
  return out;
}

SquadScore squad_score(const std::vector<SquadExample>& examples, const std::map<std::string, std::string>& predictions) {
  SquadScore score;
  double em = 0, f1 = 0;
  for (const auto& example : examples) {
    ++score.questions;
    const auto it = predictions.find(example.id);
    if (it == predictions.end()) {
      ++score.unanswered;
      continue;
    }
    double best_em = 0, best_f1 = 0;
    for (const auto& truth : example.answers) {
      best_em = std::max(best_em, normalize_squad_answer(it->second) == normalize_squad_answer(truth.text) ? 1.0 : 0.0);
      best_f1 = std::max(best_f1, f1_of(it->second, truth.text));
    }
    em += best_em;
    f1 += best_f1;
  }
  if (score.questions > 0) {
    score.exact_match = 100.0 * em / static_cast<double>(score.questions);
    score.f1 = 100.0 * f1 / static_cast<double>(score.questions);
  }
  return score;
}

}  // namespace frugal
