// libFuzzer target: a SQuAD JSON file read and made into features (windows, answer positions)
// with a small vocabulary, and the same bytes through `frugal-data convert`'s SQuAD and JSONL
// converters. Seeds: tests/fuzz/corpus/squad.
#include "frugal/data/converters.hpp"
#include "frugal/data/tar_shard.hpp"
#include "frugal/text/squad.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const frugal::WordPieceTokenizer tokenizer({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b", "the", "."});
  const auto file = frugal::fuzz::as_file(frugal::fuzz::bytes_of(data, size), ".json");
  const auto shards = file.parent_path() / "shards";
  for (auto* convert : {&frugal::convert_squad, &frugal::convert_jsonl}) {
    std::filesystem::remove_all(shards);
    frugal::ShardWriter out(shards);
    frugal::fuzz::expect_frugal_errors([&] { (*convert)(file, out); });
  }
  return frugal::fuzz::expect_frugal_errors([&] {
    const auto examples = frugal::read_squad(file);
    frugal::make_squad_features(examples, tokenizer, frugal::SquadFeatureOptions{32, 8, 8}, /*training=*/true);
  });
}
