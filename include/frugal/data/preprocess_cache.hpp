#pragma once
// Cached preprocessing: the output of an expensive transform (tokenised features, resized
// images) is kept as shards under a key that hashes the source data, the transform's name,
// configuration and version. A later run with the same key reuses the shards; any change to
// the data, the settings or the version (bump it when the code changes) builds a new entry.
// An entry appears whole or not at all: it is built in a temporary directory and renamed.
//
//   frugal::PreprocessCache cache(".cache/frugal/preprocessed");
//   frugal::CacheKey key{"squad_features", 1, "max_seq=384 stride=128",
//                        frugal::fingerprint_files({"train-v1.1.json"})};
//   auto entry = cache.get_or_build(key, [&](const std::filesystem::path& dir) {
//     frugal::ShardWriter out(dir);  /* ... write features ... */  out.finish();
//   });
//   auto data = std::make_shared<frugal::ShardedDataset>(entry.dir, decode);

#include <array>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "frugal/base/enum_names.hpp"

namespace frugal {

/// How a source file is identified: by its bytes (safe; reads the files once a run) or by
/// path, size and modification time (instant; misses an edit that keeps both).
enum class Fingerprint { content, metadata };
constexpr std::array<EnumName<Fingerprint>, 2> names_of(Fingerprint) {
  return {{{Fingerprint::content, "content"}, {Fingerprint::metadata, "metadata"}}};
}

/// One hex digest over the files (in the order given) and their names.
std::string fingerprint_files(const std::vector<std::filesystem::path>& files, Fingerprint how = Fingerprint::content);

struct CacheKey {
  std::string transform;  // what the preprocessing is, e.g. "squad_features"
  int64_t version = 1;    // bump when the transform's code changes its output
  std::string config;     // its settings, serialised
  std::string source;     // fingerprint of its input (fingerprint_files), or a description of it
  /// Hex XXH3-128 over all four parts.
  std::string digest() const;
};

class PreprocessCache {
 public:
  explicit PreprocessCache(std::filesystem::path root);

  struct Entry {
    std::filesystem::path dir;  // the cached shards
    bool hit = false;           // reused rather than built
    std::string digest;
  };
  /// The entry for `key`. On a miss, `build` writes the entry's files into the directory it is
  /// given, which becomes the entry when it returns (an exception leaves no entry behind).
  Entry get_or_build(const CacheKey& key, const std::function<void(const std::filesystem::path&)>& build) const;
  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
};

}  // namespace frugal
