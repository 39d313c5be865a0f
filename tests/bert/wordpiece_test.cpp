#include <catch2/catch.hpp>

#include <fstream>

#include "frugal/errors.hpp"
#include "frugal/text/wordpiece.hpp"
#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

// Accents, punctuation, CJK, control and format characters, odd whitespace, very long and
// unknown words, emoji, combining marks, upper case.
const std::vector<std::string> kTexts{
    "Hello, world! (yes) -- 3.14 $5 don't",
    "Caf\u00e9 r\u00e9sum\u00e9 NA\u00cfVE na\u0131ve e\u0301t\u00e9",
    "\u6211\u7231\u5317\u4eac mixed\u4e2d\u6587text",
    "a\x01" "b\u200bc\x07d\te\nf",
    "nbsp\u00a0and\u3000ideographic space",
    "line\u2028paragraph\u2029vt\x0b" "ff\x0c" "nel\u0085fs\x1c" "end",
    std::string(150, 'a') + " short",
    "zyxwv playing played \U0001F600 ok",
    "HELLO World \u00bfQu\u00e9? \u00abguillemets\u00bb \u2014 dash",
    "",
    "   ",
    // Special tokens written in the text: exact case only, even inside a word.
    "[CLS] hello [SEP] world [MASK]",
    "hello[SEP]world [cls] [UNK]x [PAD]",
    "[CLS][SEP][[CLS]]",
    "[Cls] [MASK ] HELLO[MASK]ok \u00e9[SEP]",
};

const std::vector<std::string> kWords{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "yes", "don", "##t",
                                      "cafe", "resume", "naive", "ete", "mixed", "text", "play", "##ing", "##ed", "ok",
                                      "and", "space", "short", "que", "dash", "nbsp", "ideographic", "guillemets", "3", "14",
                                      "5", "Hello", "World", "HELLO", "Caf", "##\u00e9", "r\u00e9sum\u00e9"};

fs::path write_vocab(const fs::path& dir) {
  std::vector<std::string> vocab = kWords;
  // Every single character (and its continuation form) that the texts produce, so WordPiece can
  // fall back to characters, except 'z', 'y', 'w', 'v' ('zyxwv' must become [UNK]).
  const std::string chars = "abcdefghijklmnopqrstuxABCDEFGHIJKLMNOPQRSTUX0123456789.,!?()[]$'-\u00bf\u00ab\u00bb\u2014\u00e9\u00cf\u0131";
  for (size_t i = 0; i < chars.size();) {
    size_t n = 1;
    while (i + n < chars.size() && (static_cast<unsigned char>(chars[i + n]) & 0xC0) == 0x80) ++n;
    vocab.push_back(chars.substr(i, n));
    vocab.push_back("##" + chars.substr(i, n));
    i += n;
  }
  for (const char* cjk : {"\u6211", "\u7231", "\u5317", "\u4eac", "\u4e2d", "\u6587"}) vocab.emplace_back(cjk);
  std::ofstream out(dir / "vocab.txt");
  for (const auto& v : vocab) out << v << "\n";
  return dir / "vocab.txt";
}

}  // namespace

TEST_CASE("WordPiece matches Hugging Face BertTokenizer: tokens, ids and character offsets, cased and uncased", "[python]") {
  const fs::path dir = scratch_dir("wordpiece");
  const fs::path vocab = write_vocab(dir);
  std::ofstream(dir / "texts.json") << nlohmann::json(kTexts).dump();
  for (const bool lower : {true, false}) {
    INFO("lower_case " << lower);
    const auto ref = run_python_reference("hf_wordpiece.py", c10::str("tokenize ", vocab.string(), " ", (dir / "texts.json").string(), " ", lower ? 1 : 0));
    WordPieceOptions options;
    options.lower_case = lower;
    const WordPieceTokenizer tok = WordPieceTokenizer::from_vocab_file(vocab, options);
    size_t offsets_compared = 0;
    std::vector<std::string> legacy_differs;
    for (size_t t = 0; t < kTexts.size(); ++t) {
      INFO("text " << t << ": " << kTexts[t]);
      const auto ours = tok.tokenize(kTexts[t]);
      std::vector<std::string> tokens;
      std::vector<int64_t> ids;
      std::vector<std::vector<int64_t>> offsets;
      for (const auto& w : ours) {
        tokens.push_back(w.text);
        ids.push_back(w.id);
        offsets.push_back({w.begin, w.end});
      }
      CHECK(tokens == ref["tokens"][t].get<std::vector<std::string>>());
      // The pure-Python tokenizer (BertTokenizerLegacy) NFC-normalises first, the fast one (transformers
      // 5's BertTokenizer) does not: they differ on a decomposed accent in cased mode, where Frugal
      // follows the fast one. Everywhere else all three agree.
      if (ref["legacy_tokens"][t] == ref["tokens"][t]) {
        CHECK(tokens == ref["legacy_tokens"][t].get<std::vector<std::string>>());
      } else {
        legacy_differs.push_back(c10::str(lower ? "lower " : "cased ", t));
      }
      CHECK(ids == ref["ids"][t].get<std::vector<int64_t>>());
      // The fast tokenizer's offsets, where it tokenizes as the reference one does.
      if (ref["fast_tokens"][t] == ref["tokens"][t]) {
        CHECK(offsets == ref["offsets"][t].get<std::vector<std::vector<int64_t>>>());
        ++offsets_compared;
      }
    }
    CHECK(offsets_compared == kTexts.size());  // the fast tokenizer agrees on every text here
    CHECK(legacy_differs == (lower ? std::vector<std::string>{} : std::vector<std::string>{"cased 1"}));  // "e\u0301t\u00e9"
  }
}

TEST_CASE("WordPiece: offsets point into the original text, long words and bad input", "[bert]") {
  const WordPieceTokenizer tok({"[UNK]", "un", "##aff", "##able", "caf", "##e", ",", "x"});
  const auto t = tok.tokenize("Unaffable, CAF\u00c9 xx");
  REQUIRE(t.size() == 7);
  CHECK(t[0].text == "un");
  CHECK(t[1].text == "##aff");
  CHECK(t[2].text == "##able");
  CHECK((t[2].begin == 5 && t[2].end == 9));
  CHECK((t[3].text == "," && t[3].begin == 9));
  CHECK((t[4].text == "caf" && t[4].begin == 11 && t[4].end == 14));
  CHECK((t[5].text == "##e" && t[5].begin == 14 && t[5].end == 15));  // 'É' is one character of the original
  CHECK(t[6].text == "[UNK]");                                       // "xx": no "##x"
  CHECK(tok.tokenize(std::string(101, 'x')).front().text == "[UNK]");
  CHECK_THROWS_WITH(tok.tokenize("ok \xff\xfe"), Catch::Contains("at byte offset 3") && Catch::Contains("invalid UTF-8"));
  // After a special token, offsets and byte offsets still count from the start of the text.
  const WordPieceTokenizer special({"[UNK]", "[SEP]", "caf", "##e", "x"});
  const auto s = special.tokenize("\u00e9[SEP]caf[SEP]");
  REQUIRE(s.size() == 4);
  CHECK((s[0].text == "[UNK]" && s[0].begin == 0 && s[0].end == 1));
  CHECK((s[1].text == "[SEP]" && s[1].id == 1 && s[1].begin == 1 && s[1].end == 6));
  CHECK((s[2].text == "caf" && s[2].begin == 6 && s[2].end == 9));
  CHECK((s[3].text == "[SEP]" && s[3].begin == 9 && s[3].end == 14));
  CHECK(special.tokenize("[CLS]").front().text == "[UNK]");  // not in this vocabulary: tokenized as text
  CHECK_THROWS_WITH(special.tokenize("[SEP]ok \xff"), Catch::Contains("at byte offset 8"));
  CHECK_THROWS_AS(WordPieceTokenizer({"a", "b"}), DataError);
  CHECK_THROWS_WITH(WordPieceTokenizer::from_vocab_file("no/such/vocab.txt"), Catch::Contains("no/such/vocab.txt"));
}
