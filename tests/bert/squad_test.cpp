#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>

#include "frugal/base/preemption.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"
#include "frugal/text/squad.hpp"
#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

Json squad_file(const std::vector<std::tuple<std::string, std::string, std::vector<std::string>>>& questions) {
  Json qas = Json::array();
  std::string context = "The Normans were in Normandy. Caf\u00e9 au lait, an 'Old' drink! The end.";
  for (const auto& [id, question, truths] : questions) {
    Json answers = Json::array();
    for (const auto& t : truths) answers.push_back({{"text", t}, {"answer_start", 0}});
    qas.push_back({{"id", id}, {"question", question}, {"answers", answers}});
  }
  return {{"data", {{{"title", "t"}, {"paragraphs", {{{"context", context}, {"qas", qas}}}}}}}, {"version", "1.1"}};
}

WordPieceTokenizer letters_tokenizer() {
  std::vector<std::string> vocab{"[PAD]", "[UNK]", "[CLS]", "[SEP]"};
  for (char c = 'a'; c <= 'z'; ++c) {
    vocab.emplace_back(1, c);
    vocab.push_back(std::string("##") + c);
  }
  for (const char* w : {"the", "answer", "is", "here", "what", "where", "word", ".", "?", "caf", "##\u00e9"}) vocab.emplace_back(w);
  return WordPieceTokenizer(vocab);
}

}  // namespace

TEST_CASE("SQuAD EM and F1 match an independent implementation of the official v1.1 script", "[python]") {
  const fs::path dir = scratch_dir("squad_eval");
  const std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> questions{
      {"q1", "?", {"the Normans", "Normans"}},
      {"q2", "?", {"in Normandy"}},
      {"q3", "?", {"Caf\u00e9 au lait"}},
      {"q4", "?", {"an 'Old' drink!"}},
      {"q5", "?", {"The end."}},
      {"q6", "?", {"a b c d"}},
      {"q7", "?", {"Normans"}},
      {"q8", "?", {"x"}},
      {"q9", "?", {"\u00ABthe\u00BB quote"}},
      // Python's str.lower(): \u0130 becomes i + U+0307, a word-final \u03a3 becomes \u03c2.
      {"q10", "?", {"\u0130STANBUL"}},
      {"q11", "?", {"\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u039f\u03a3."}},
  };
  std::ofstream(dir / "dev.json") << squad_file(questions).dump();
  const std::map<std::string, std::string> predictions{
      {"q1", "Normans"},           {"q2", "Normandy."},     {"q3", "CAF\u00c9 AU LAIT"}, {"q4", "old drink"},
      {"q5", "the end"},           {"q6", "b c d e f"},     {"q7", ""},                  {"q9", "\u00ABthe\u00BB Quote"},
      {"q10", "i\u0307stanbul"},   {"q11", "\u03bf\u03b4\u03bf\u03c2 \u03c3\u03bf\u03c6\u03bf\u03c2"},
      {"q12", "'\u03a3' \u03a3\u0391\u03a3' x\u03a3y A\u03a3\u00AD \u0130i"}};
  std::ofstream(dir / "predictions.json") << Json(predictions).dump();
  const auto ref = run_python_reference("squad_v11_eval.py", "score " + (dir / "dev.json").string() + " " + (dir / "predictions.json").string());
  const auto examples = read_squad(dir / "dev.json");
  const SquadScore score = squad_score(examples, predictions);
  CHECK(score.questions == 11);
  CHECK(score.unanswered == 1);  // q8 (q12 answers no question: only normalised)
  CHECK(score.exact_match == Approx(ref["exact_match"].get<double>()).epsilon(1e-12));
  CHECK(score.f1 == Approx(ref["f1"].get<double>()).epsilon(1e-12));
  for (const auto& [id, text] : predictions) CHECK(normalize_squad_answer(text) == ref["normalized"][text].get<std::string>());
}

TEST_CASE("SQuAD features: windows with stride, answer positions through offsets, padding, query truncation", "[bert]") {
  const WordPieceTokenizer tok = letters_tokenizer();
  // 38 words, one-letter ones and "the answer" at word 30: 39 context tokens.
  std::string context;
  for (int i = 0; i < 38; ++i) context += i == 30 ? "the answer " : std::string(1, static_cast<char>('a' + i % 26)) + " ";
  const int64_t answer_start = static_cast<int64_t>(context.find("the answer"));
  SquadExample example{"id", "", context, "what is here what is here", {{"the answer", answer_start}}};
  SquadFeatureOptions options;
  options.max_seq_length = 24;
  options.doc_stride = 8;
  options.max_query_length = 4;
  const auto features = make_squad_features({example}, tok, options, /*training=*/true);
  // 24 - 4 - 3 = 17 tokens per window; windows start at 0, 8, 16 and 24 (15 tokens, padded).
  REQUIRE(features.size() == 4);
  int holding = 0;
  for (const auto& f : features) {
    REQUIRE(f.input_ids.size() == 24);
    CHECK(f.input_ids[0] == tok.id_of("[CLS]"));
    CHECK(f.input_ids[5] == tok.id_of("[SEP]"));  // 4 query tokens
    if (f.start_position == 0) {
      CHECK(f.end_position == 0);
      continue;
    }
    ++holding;
    const auto s = static_cast<size_t>(f.start_position), e = static_cast<size_t>(f.end_position);
    CHECK(context.substr(static_cast<size_t>(f.char_begin[s]), static_cast<size_t>(f.char_end[e] - f.char_begin[s])) == "the answer");
    CHECK(f.token_type_ids[s] == 1);
  }
  CHECK(holding == 2);  // windows starting at 16 and 24 hold tokens 30-31
  // Every context token is max-context in exactly one window (token 30: the window from 24, with
  // 6 tokens left and 8 right, not the one from 16, with 14 left and 2 right). Window k starts at
  // token 8k and its context begins at position 6.
  std::vector<int> owners(39, 0);
  for (size_t k = 0; k < features.size(); ++k) {
    for (size_t p = 0; p < 24; ++p) {
      if (features[k].max_context[p] == 1) ++owners[p - 6 + k * 8];
    }
  }
  for (const int o : owners) CHECK(o == 1);
  const auto& last = features.back();
  CHECK(last.attention_mask.back() == 0);
  CHECK(last.input_ids.back() == tok.id_of("[PAD]"));

  // Post-processing picks the best in-context span over all windows and returns the original text;
  // a start outside its max-context window does not count, however high its logit.
  std::vector<float> start(features.size() * 24, -100.f), end(features.size() * 24, -100.f);
  const auto& f2 = features[2];
  const auto& f3 = features[3];
  start[2 * 24 + static_cast<size_t>(f2.start_position)] = 50.f;   // "the answer" + one letter, in the
  end[2 * 24 + static_cast<size_t>(f2.end_position) + 1] = 50.f;   // window that is not max-context for "the"
  start[3 * 24 + static_cast<size_t>(f3.start_position)] = 5.f;
  end[3 * 24 + static_cast<size_t>(f3.end_position)] = 5.f;
  start[0] = end[0] = 100.f;  // [CLS] is never an answer
  const auto answers = best_answers({example}, features, start, end);
  CHECK(answers.at("id") == "the answer");
}

TEST_CASE("SQuAD JSON errors name the file and the JSON path", "[bert]") {
  const fs::path dir = scratch_dir("squad_bad");
  auto error_of = [&](const std::string& text) {
    std::ofstream(dir / "bad.json", std::ios::trunc) << text;
    try {
      read_squad(dir / "bad.json");
    } catch (const DataError& e) {
      CHECK(e.file() == (dir / "bad.json").string());
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(error_of(R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "question": 5, "answers": []}]}]}]})"),
             Catch::Contains("$.data[0].paragraphs[0].qas[0].question: expected string"));
  CHECK_THAT(error_of(R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "question": "q",
               "answers": [{"text": "abc", "answer_start": 2}]}]}]}]})"),
             Catch::Contains("$.data[0].paragraphs[0].qas[0].answers[0].answer_start: 2 puts the answer outside"));
  // The largest int64 start: start + length would overflow and pass a range check written as a sum.
  CHECK_THAT(error_of(R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "question": "q",
               "answers": [{"text": "b", "answer_start": 9223372036854775807}]}]}]}]})"),
             Catch::Contains("answer_start: 9223372036854775807 puts the answer outside"));
  CHECK_THAT(error_of(R"({"version": "1.1"})"), Catch::Contains("$.data: missing"));
  // An empty data set is an error before training, not a bare LibTorch error after it.
  CHECK_THAT(error_of(R"({"data": [{"title": "t", "paragraphs": []}]})"), Catch::Contains("no questions"));
  CHECK_THAT(error_of(R"({"data": []})"), Catch::Contains("no questions"));
  CHECK_THAT(error_of(R"({"data": [)"), Catch::Contains("not valid JSON"));
  // Found by the squad fuzz target: a number no type holds was an nlohmann out_of_range escaping.
  CHECK_THAT(error_of(R"({"version": 1E99999, "data": []})"), Catch::Contains("not valid JSON") && Catch::Contains("number overflow"));
}

TEST_CASE("SQuAD preprocessing reports its progress and stops between questions on a pre-emption notice", "[bert]") {
  const WordPieceTokenizer tok = letters_tokenizer();
  std::vector<SquadExample> examples;
  for (int i = 0; i < 200; ++i) examples.push_back({c10::str("q", i), "", "a b c d e f", "what", {{"c", 4}}});
  SquadFeatureOptions options;
  options.max_seq_length = 16;
  options.progress_every_s = 0;  // a line at every check (each 64 questions)
  const auto log_file = scratch_dir("squad_progress") / "log.txt";
  log::add_file_sink(log_file);
  CHECK(make_squad_features(examples, tok, options, /*training=*/true).size() == 200);
  log::remove_file_sink();
  const std::string text = bytes_of(log_file);
  CHECK_THAT(text, Catch::Contains("SQuAD features: 64 of 200 questions (32%), 64 windows") && Catch::Contains("192 of 200"));

  preemption::install();
  std::raise(SIGTERM);
  CHECK_THROWS_WITH(make_squad_features(examples, tok, options, true), Catch::Contains("SIGTERM while preparing the SQuAD features"));
}
