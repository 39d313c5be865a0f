#pragma once
// BERT's tokenizer, as Hugging Face's BertTokenizer computes it: text cleanup (control
// characters dropped, whitespace unified), spaces around CJK ideographs, lower-casing and accent
// stripping (NFD, then combining marks removed) for uncased models, splitting on whitespace and
// punctuation, then greedy longest-match-first WordPiece with "##" continuations and [UNK] for a
// word it cannot cover or longer than 100 characters. Every token carries the span of the
// original text it came from, in characters (Unicode code points, as Python and SQuAD count).
// Special tokens written in the text ("[CLS]", "[SEP]", ...) map to their ids, as in Hugging Face.
// Unicode data (categories, decompositions, case) comes from utf8proc.
//
//   frugal::WordPieceTokenizer tok = frugal::WordPieceTokenizer::from_vocab_file("vocab.txt");
//   for (const auto& t : tok.tokenize("Héllo, world!")) std::cout << t.text << " " << t.id << " " << t.begin << "\n";

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace frugal {

struct WordPieceToken {
  std::string text;   // the vocabulary entry ("##ing" for a continuation)
  int64_t id = 0;
  int64_t begin = 0;  // [begin, end) in characters of the original text
  int64_t end = 0;
};

struct WordPieceOptions {
  bool lower_case = true;     // uncased models
  int strip_accents = -1;     // -1: as lower_case (Hugging Face's default), 0 no, 1 yes
  bool split_cjk = true;      // tokenize_chinese_chars
  int64_t max_chars_per_word = 100;
  /// Written in the text, these are matched exactly (case-sensitive, even in a word) and map to
  /// their ids, as BertTokenizer's special tokens do; those absent from the vocabulary are not.
  std::vector<std::string> special_tokens{"[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"};
};

class WordPieceTokenizer {
 public:
  /// `vocab`: tokens in id order. DataError if "[UNK]" is missing.
  explicit WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options = {});
  /// One token per line, ids by line number (Hugging Face's vocab.txt).
  static WordPieceTokenizer from_vocab_file(const std::filesystem::path& file, WordPieceOptions options = {});

  /// Tokens of `text` (UTF-8; invalid bytes are a DataError naming the byte offset).
  std::vector<WordPieceToken> tokenize(std::string_view text) const;
  /// The id of a vocabulary entry; DataError naming it if absent.
  int64_t id_of(const std::string& token) const;
  bool contains(const std::string& token) const { return ids_.count(token) > 0; }
  const std::vector<std::string>& vocab() const { return vocab_; }
  int64_t unk_id() const { return unk_id_; }

 private:
  /// Steps 1-3 on text without special tokens, appending to `out`; returns its length in characters.
  int64_t tokenize_plain(std::string_view text, size_t byte_offset, int64_t char_offset, std::vector<WordPieceToken>& out) const;

  std::vector<std::string> vocab_;
  std::vector<std::string> specials_;  // options_.special_tokens found in the vocabulary
  std::unordered_map<std::string, int64_t> ids_;
  WordPieceOptions options_;
  int64_t unk_id_ = 0;
};

}  // namespace frugal
