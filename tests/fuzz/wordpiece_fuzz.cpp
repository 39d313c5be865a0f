// libFuzzer target: WordPiece tokenization of any bytes (invalid UTF-8 included). Seeds:
// tests/fuzz/corpus/wordpiece.
#include "frugal/text/wordpiece.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const frugal::WordPieceTokenizer tokenizer({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##a", "b", "##b", "é", ",", "."});
  return frugal::fuzz::expect_frugal_errors([&] { tokenizer.tokenize(frugal::fuzz::bytes_of(data, size)); });
}
