#include "frugal/text/wordpiece.hpp"

#include <c10/util/StringUtil.h>
#include <utf8proc.h>

#include <fstream>

#include "frugal/errors.hpp"

namespace frugal {
namespace {

struct Char {
  utf8proc_int32_t cp;
  int64_t source;  // index of the original character it came from
};

// Hugging Face's _is_whitespace (Zs and four controls) plus what its split() then splits on: the line
// and paragraph separators (Zl, Zp: U+2028, U+2029), which _clean_text keeps. The other controls
// Python's str.isspace() counts (\x0b, \x0c, \x1c-\x1f, \x85) are removed as controls first.
bool is_whitespace(utf8proc_int32_t cp) {
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  const auto category = utf8proc_category(cp);
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL || category == UTF8PROC_CATEGORY_ZP;
}

// Hugging Face's _is_control: categories C* except the whitespace controls.
bool is_control(utf8proc_int32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS:
      return true;
    default:
      return false;
  }
}

// ASCII symbols count as punctuation too ($, ^, `...), as in Hugging Face's _is_punctuation.
bool is_punctuation(utf8proc_int32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126)) return true;
  const auto category = utf8proc_category(cp);
  return category >= UTF8PROC_CATEGORY_PC && category <= UTF8PROC_CATEGORY_PO;
}

bool is_cjk(utf8proc_int32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

std::string encode(const std::vector<Char>& chars, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    utf8proc_uint8_t buffer[4];
    out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(utf8proc_encode_char(chars[i].cp, buffer)));
  }
  return out;
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  // A repeated entry takes its last line's id, as Hugging Face's load_vocab (a dict filled in order).
  for (size_t i = 0; i < vocab_.size(); ++i) ids_[vocab_[i]] = static_cast<int64_t>(i);
  const auto unk = ids_.find("[UNK]");
  if (unk == ids_.end()) throw DataError("vocabulary", -1, "has no [UNK] token");
  unk_id_ = unk->second;
  for (const auto& special : options_.special_tokens) {
    if (special.empty() || special.front() != '[') {
      throw DataError("vocabulary", -1, "special token '" + special + "' must start with '[' (as BERT's do)");
    }
    if (ids_.count(special) > 0) specials_.push_back(special);
  }
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::filesystem::path& file, WordPieceOptions options) {
  std::ifstream in(file);
  if (!in) throw DataError(file.string(), -1, "cannot open the vocabulary");
  std::vector<std::string> vocab;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab.push_back(line);
  }
  try {
    return WordPieceTokenizer(std::move(vocab), options);
  } catch (const DataError& e) {
    throw DataError(file.string(), -1, "has no [UNK] token");
  }
}

int64_t WordPieceTokenizer::id_of(const std::string& token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) throw DataError("vocabulary", -1, "has no token '" + token + "'");
  return it->second;
}

std::vector<WordPieceToken> WordPieceTokenizer::tokenize(std::string_view text) const {
  // Special tokens written in the text are matched first, exactly (case and all), wherever they
  // stand, as Hugging Face's tokenizers do; the text between them is tokenized as usual.
  std::vector<WordPieceToken> out;
  size_t segment = 0;
  int64_t chars_before = 0;
  for (size_t at = text.find('['); at != std::string_view::npos; at = text.find('[', at)) {
    const std::string* match = nullptr;
    for (const auto& special : specials_) {
      if (text.compare(at, special.size(), special) == 0 && (match == nullptr || special.size() > match->size())) match = &special;
    }
    if (match == nullptr) {
      ++at;
      continue;
    }
    chars_before += tokenize_plain(text.substr(segment, at - segment), segment, chars_before, out);
    const auto length = static_cast<int64_t>(match->size());  // ASCII: bytes are characters
    out.push_back({*match, ids_.at(*match), chars_before, chars_before + length});
    chars_before += length;
    at += match->size();
    segment = at;
  }
  tokenize_plain(text.substr(segment), segment, chars_before, out);
  return out;
}

int64_t WordPieceTokenizer::tokenize_plain(std::string_view text, size_t byte_offset, int64_t char_offset,
                                           std::vector<WordPieceToken>& out) const {
  const bool strip = options_.strip_accents < 0 ? options_.lower_case : options_.strip_accents == 1;
  // 1. Decode, clean, space CJK, lower-case and strip accents, keeping each char's source index.
  std::vector<Char> chars;
  chars.reserve(text.size());
  int64_t index = char_offset;
  for (size_t at = 0; at < text.size(); ++index) {
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                    static_cast<utf8proc_ssize_t>(text.size() - at), &cp);
    if (n < 0) throw DataError("text", static_cast<int64_t>(byte_offset + at), "invalid UTF-8");
    at += static_cast<size_t>(n);
    if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
    if (is_whitespace(cp)) {
      chars.push_back({' ', index});
      continue;
    }
    if (options_.split_cjk && is_cjk(cp)) {
      chars.push_back({' ', index});
      chars.push_back({cp, index});
      chars.push_back({' ', index});
      continue;
    }
    if (options_.lower_case) cp = utf8proc_tolower(cp);
    if (strip) {
      utf8proc_int32_t decomposed[8];
      int last_boundclass = 0;
      const auto m = utf8proc_decompose_char(cp, decomposed, 8, UTF8PROC_DECOMPOSE, &last_boundclass);
      if (m > 0 && m <= 8) {
        for (utf8proc_ssize_t k = 0; k < m; ++k) {
          if (utf8proc_category(decomposed[k]) != UTF8PROC_CATEGORY_MN) chars.push_back({decomposed[k], index});
        }
        continue;
      }
    }
    chars.push_back({cp, index});
  }
  // 2. Words: runs of non-space, with every punctuation character a word of its own.
  std::vector<std::pair<size_t, size_t>> words;
  size_t start = 0;
  for (size_t i = 0; i <= chars.size(); ++i) {
    const bool end = i == chars.size();
    if (end || chars[i].cp == ' ' || is_punctuation(chars[i].cp)) {
      if (i > start) words.emplace_back(start, i);
      if (!end && chars[i].cp != ' ') words.emplace_back(i, i + 1);
      start = i + 1;
    }
  }
  // 3. WordPiece, greedy longest match first.
  for (const auto& [begin, end] : words) {
    const int64_t word_begin = chars[begin].source, word_end = chars[end - 1].source + 1;
    if (static_cast<int64_t>(end - begin) > options_.max_chars_per_word) {
      out.push_back({"[UNK]", unk_id_, word_begin, word_end});
      continue;
    }
    std::vector<WordPieceToken> pieces;
    bool covered = true;
    for (size_t from = begin; from < end;) {
      size_t to = end;
      int64_t found = -1;
      std::string piece;
      for (; to > from; --to) {
        piece = encode(chars, from, to);
        if (from > begin) piece.insert(0, "##");
        const auto it = ids_.find(piece);
        if (it != ids_.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {
        covered = false;
        break;
      }
      pieces.push_back({piece, found, chars[from].source, chars[to - 1].source + 1});
      from = to;
    }
    if (covered) {
      out.insert(out.end(), pieces.begin(), pieces.end());
    } else {
      out.push_back({"[UNK]", unk_id_, word_begin, word_end});
    }
  }
  return index - char_offset;
}

}  // namespace frugal
