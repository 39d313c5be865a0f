#pragma once
// Tar shards in the WebDataset layout, read and written with libarchive. A shard is a plain
// POSIX tar whose members are grouped by key (see sample.hpp), so Python's webdataset or
// tarfile reads what Frugal writes and the reverse. Shards are read front to back, so the
// operating system reads ahead; a ShardIndex (sample offsets) gives random access and lets a
// resumed run skip to its position without reading what it skips.
//
//   frugal::ShardWriter writer(out_dir, frugal::ShardWriterOptions().target_bytes(256 << 20));
//   writer.write({"000001", {{"npy", bytes}, {"cls", "3"}}});
//   std::vector<frugal::ShardInfo> shards = writer.finish();   // one "<name>.idx.json" beside each
//
//   frugal::ShardScanner scan("shard-000000.tar");
//   while (auto sample = scan.next()) use(*sample);

#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/base/enum_names.hpp"
#include "frugal/data/sample.hpp"

struct archive;

namespace frugal {

/// What a reader does with a corrupt or truncated shard or sample.
enum class OnCorrupt {
  error,  ///< throw DataError naming the file and byte offset (default)
  skip,   ///< count it, log a warning with the same text, and go on
};
constexpr std::array<EnumName<OnCorrupt>, 2> names_of(OnCorrupt) { return {{{OnCorrupt::error, "error"}, {OnCorrupt::skip, "skip"}}}; }

struct ShardWriterOptions {
  /// A new shard starts once the current one holds this many bytes (a sample is never split).
  TORCH_ARG(int64_t, target_bytes) = int64_t{256} << 20;
  /// Shard file names: <prefix>-000000.tar, <prefix>-000001.tar, ...
  TORCH_ARG(std::string, prefix) = "shard";
  /// Write "<shard>.idx.json" beside each finished shard.
  TORCH_ARG(bool, write_index) = true;

 public:
  void validate() const;
};

struct ShardInfo {
  std::filesystem::path path;
  int64_t samples = 0;
  int64_t bytes = 0;
};

/// Writes samples into numbered shards. Each shard is written under a temporary name, flushed
/// to disk and renamed, so a shard on disk is always complete. Members carry mtime 0 and no
/// owner, so the same samples give byte-identical shards.
class ShardWriter {
 public:
  ShardWriter(std::filesystem::path directory, ShardWriterOptions options = {});
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  /// Appends one sample; its key and field names must be safe member names, and its key must
  /// differ from the previous sample's.
  void write(const Sample& sample);
  /// Closes the last shard and returns every shard written.
  std::vector<ShardInfo> finish();
  int64_t samples_written() const { return samples_written_; }

 private:
  void open_shard();
  void close_shard();

  std::filesystem::path directory_;
  ShardWriterOptions options_;
  std::vector<ShardInfo> shards_;
  struct archive* archive_ = nullptr;
  int fd_ = -1;
  std::filesystem::path temp_path_;
  int64_t shard_bytes_ = 0;
  int64_t samples_written_ = 0;
  std::string last_key_;
  bool finished_ = false;
};

/// Reads a shard front to back, one sample (the consecutive members that share a key) at a time.
/// Member names that are absolute or contain ".." and members that are links or devices are
/// rejected; a corrupt or truncated shard throws DataError naming the file and byte offset.
class ShardScanner {
 public:
  explicit ShardScanner(std::filesystem::path shard);
  ~ShardScanner();
  ShardScanner(const ShardScanner&) = delete;
  ShardScanner& operator=(const ShardScanner&) = delete;

  std::optional<Sample> next();
  /// Byte offset of the first tar header of the sample that next() returned last.
  int64_t sample_offset() const { return sample_offset_; }
  /// After next() threw: where the damage starts, i.e. the end of the last whole sample. A sample
  /// is returned only when all its members were read; the error then comes on the next call.
  int64_t damage_offset() const { return damage_offset_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  bool read_member();  // false at the end of the archive

  std::filesystem::path path_;
  struct archive* archive_ = nullptr;
  // The member read ahead: the first of the next sample.
  std::optional<std::pair<std::string, std::string>> pending_name_;
  std::string pending_bytes_;
  int64_t pending_offset_ = 0;
  int64_t sample_offset_ = 0;
  int64_t failed_offset_ = -1;  // of the member whose read failed
  std::string failed_key_;      // its key, if its header was readable
  int64_t damage_offset_ = -1;
  std::exception_ptr deferred_error_;
  bool at_end_ = false;
};

/// Where each sample of one shard starts. Sample i spans [offsets[i], offsets[i+1]) (the last
/// one runs to the end of the file), so it is read with one sequential read.
struct ShardIndex {
  std::filesystem::path shard;
  int64_t shard_bytes = 0;  // size of the file when indexed: a different size means a stale index
  int64_t end_offset = 0;   // where the last indexed sample ends (before any damage)
  std::vector<std::string> keys;
  std::vector<int64_t> offsets;
  /// Set when the shard is damaged and `on_corrupt` was skip: the samples before the damage are
  /// indexed, the rest of the shard is not.
  std::optional<std::string> damage;

  int64_t size() const { return static_cast<int64_t>(offsets.size()); }
  int64_t sample_end(int64_t i) const {
    return i + 1 < size() ? offsets[static_cast<size_t>(i + 1)] : end_offset;
  }
};

/// "<shard>.idx.json"
std::filesystem::path index_path(const std::filesystem::path& shard);
/// Scans the shard and records where each sample starts.
ShardIndex build_shard_index(const std::filesystem::path& shard, OnCorrupt on_corrupt = OnCorrupt::error);
/// Loads the shard's index file when it exists and matches the shard's size; otherwise builds
/// it (and writes it when `write` is set and the directory is writable).
ShardIndex load_shard_index(const std::filesystem::path& shard, OnCorrupt on_corrupt = OnCorrupt::error,
                            bool write = true);
void save_shard_index(const ShardIndex& index);

/// Reads sample `i` of `index` with one read of its byte span.
Sample read_indexed_sample(const ShardIndex& index, int64_t i);

/// The "*.tar" files of `directory`, sorted by name; DataError if there are none.
std::vector<std::filesystem::path> list_shards(const std::filesystem::path& directory);

}  // namespace frugal
