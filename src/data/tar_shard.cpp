#include "frugal/data/tar_shard.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>
#include <nlohmann/json.hpp>

#include "base/durable_io.hpp"
#include "data/detail/tar_members.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void throw_system(const fs::path& file, const std::string& what) {
  throw DataError(file.string(), -1, what + ": " + std::strerror(errno));
}

std::string archive_reason(struct archive* a) {
  const char* why = archive_error_string(a);
  return why ? why : "unknown libarchive error";
}

int64_t tar_size(int64_t bytes) { return 512 + (bytes + 511) / 512 * 512; }

}  // namespace

void ShardWriterOptions::validate() const {
  if (target_bytes() < 1) throw OptionError("target_bytes", c10::str("target_bytes must be >= 1, got ", target_bytes()));
  if (prefix().empty() || prefix().find('/') != std::string::npos) {
    throw OptionError("prefix", "prefix must be a non-empty file name without '/', got '" + prefix() + "'");
  }
}

ShardWriter::ShardWriter(fs::path directory, ShardWriterOptions options)
    : directory_(std::move(directory)), options_(std::move(options)) {
  options_.validate();
  fs::create_directories(directory_);
}

ShardWriter::~ShardWriter() {
  if (archive_ != nullptr) archive_write_free(archive_);
  if (fd_ >= 0) ::close(fd_);
  if (!temp_path_.empty()) {
    std::error_code ignored;
    fs::remove(temp_path_, ignored);  // an unfinished shard never appears under its real name
    if (!finished_) {
      log::warn(c10::str("ShardWriter destroyed before finish(): the unfinished shard ", temp_path_.string(),
                         " and its samples were discarded"));
    }
  }
}

void ShardWriter::open_shard() {
  char number[32];
  std::snprintf(number, sizeof number, "-%06zu.tar", shards_.size());
  const std::string name = options_.prefix() + number;
  temp_path_ = directory_ / (name + ".tmp");
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_system(temp_path_, "cannot create shard");
  archive_ = archive_write_new();
  // pax only where ustar cannot hold a name or size; Python's tarfile reads both.
  if (archive_write_set_format_pax_restricted(archive_) != ARCHIVE_OK ||
      archive_write_open_fd(archive_, fd_) != ARCHIVE_OK) {
    throw DataError(temp_path_.string(), -1, "cannot start tar: " + archive_reason(archive_));
  }
  shards_.push_back({directory_ / name, 0, 0});
  shard_bytes_ = 0;
}

void ShardWriter::write(const Sample& sample) {
  if (finished_) throw Error("ShardWriter::write after finish()");
  if (sample.fields.empty()) throw DataError("sample '" + sample.key + "'", -1, "has no fields to write");
  if (sample.key == last_key_) {
    // A reader would merge the two into one sample (consecutive members with one key).
    throw DataError("sample '" + sample.key + "'", -1, "repeats the key of the sample written just before it");
  }
  for (const auto& [ext, bytes] : sample.fields) {
    const std::string name = ext.empty() ? sample.key : sample.key + "." + ext;
    if (is_unsafe_member_name(name) || split_member_name(name).first != sample.key) {
      throw DataError("sample '" + sample.key + "'", -1,
                      "member name '" + name + "' is unsafe or does not split back into its key");
    }
  }
  if (archive_ == nullptr) open_shard();
  for (const auto& [ext, bytes] : sample.fields) {
    const std::string name = ext.empty() ? sample.key : sample.key + "." + ext;
    struct archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0444);
    archive_entry_set_mtime(entry, 0, 0);
    const bool ok = archive_write_header(archive_, entry) == ARCHIVE_OK &&
                    (bytes.empty() || archive_write_data(archive_, bytes.data(), bytes.size()) ==
                                          static_cast<la_ssize_t>(bytes.size()));
    archive_entry_free(entry);
    if (!ok) throw DataError(temp_path_.string(), shard_bytes_, "cannot write member '" + name + "': " + archive_reason(archive_));
    shard_bytes_ += tar_size(static_cast<int64_t>(bytes.size()));
  }
  ++shards_.back().samples;
  ++samples_written_;
  last_key_ = sample.key;
  if (shard_bytes_ >= options_.target_bytes()) close_shard();
}

void ShardWriter::close_shard() {
  if (archive_write_close(archive_) != ARCHIVE_OK) {
    throw DataError(temp_path_.string(), -1, "cannot finish tar: " + archive_reason(archive_));
  }
  archive_write_free(archive_);
  archive_ = nullptr;
  if (::fsync(fd_) != 0) throw_system(temp_path_, "fsync failed");
  ::close(fd_);
  fd_ = -1;
  ShardInfo& info = shards_.back();
  fs::rename(temp_path_, info.path);
  temp_path_.clear();
  detail::fsync_directory(directory_);
  info.bytes = static_cast<int64_t>(fs::file_size(info.path));
  if (options_.write_index()) save_shard_index(build_shard_index(info.path));
}

std::vector<ShardInfo> ShardWriter::finish() {
  if (!finished_ && archive_ != nullptr) close_shard();
  finished_ = true;
  return shards_;
}

ShardScanner::ShardScanner(fs::path shard) : path_(std::move(shard)), archive_(detail::new_tar_reader()) {
  if (archive_read_open_filename(archive_, path_.c_str(), size_t{1} << 20) != ARCHIVE_OK) {
    const std::string why = archive_reason(archive_);
    archive_read_free(archive_);
    throw DataError(path_.string(), -1, "cannot open shard: " + why);
  }
}

ShardScanner::~ShardScanner() { archive_read_free(archive_); }

bool ShardScanner::read_member() {
  detail::TarMember member;
  try {
    if (!detail::read_tar_member(archive_, path_, 0, member)) return false;
  } catch (const DataError&) {
    failed_offset_ = member.offset;
    failed_key_ = member.name.empty() ? "" : split_member_name(member.name).first;
    throw;
  }
  pending_name_ = split_member_name(member.name);
  pending_bytes_ = std::move(member.bytes);
  pending_offset_ = member.offset;
  return true;
}

std::optional<Sample> ShardScanner::next() {
  if (deferred_error_) std::rethrow_exception(std::exchange(deferred_error_, nullptr));
  if (!pending_name_ && !at_end_) {
    try {
      if (!read_member()) at_end_ = true;
    } catch (const DataError&) {
      damage_offset_ = failed_offset_;
      throw;
    }
  }
  if (!pending_name_) return std::nullopt;
  Sample sample;
  sample.key = pending_name_->first;
  sample_offset_ = pending_offset_;
  do {
    if (!sample.fields.emplace(pending_name_->second, std::move(pending_bytes_)).second) {
      damage_offset_ = sample_offset_;
      throw DataError(path_.string(), pending_offset_,
                      "sample '" + sample.key + "' has two members with extension '" + pending_name_->second + "'");
    }
    pending_name_.reset();
    try {
      if (!read_member()) {
        at_end_ = true;
        break;
      }
    } catch (const DataError&) {
      // A damaged member of this sample (or one whose name is unreadable) spoils the sample;
      // one that starts another sample leaves this one whole: return it, fail on the next call.
      if (failed_key_.empty() || failed_key_ == sample.key) {
        damage_offset_ = sample_offset_;
        throw;
      }
      damage_offset_ = failed_offset_;
      deferred_error_ = std::current_exception();
      at_end_ = true;
      break;
    }
  } while (pending_name_->first == sample.key);
  return sample;
}

fs::path index_path(const fs::path& shard) { return fs::path(shard.string() + ".idx.json"); }

ShardIndex build_shard_index(const fs::path& shard, OnCorrupt on_corrupt) {
  ShardIndex index;
  index.shard = shard;
  index.shard_bytes = static_cast<int64_t>(fs::file_size(shard));
  index.end_offset = index.shard_bytes;
  ShardScanner scan(shard);
  try {
    while (auto sample = scan.next()) {
      index.keys.push_back(std::move(sample->key));
      index.offsets.push_back(scan.sample_offset());
    }
  } catch (const DataError& e) {
    if (on_corrupt == OnCorrupt::error) throw;
    // Every sample next() returned is whole; the damage starts where the first incomplete one does.
    index.end_offset = scan.damage_offset();
    index.damage = e.what();
    log::warn(c10::str("skipping the rest of a damaged shard (data.on_corrupt = skip), ", index.size(),
                       " samples kept: ", e.what()));
  }
  return index;
}

void save_shard_index(const ShardIndex& index) {
  nlohmann::json j{{"format", "frugal.shard_index"}, {"version", 1},      {"shard_bytes", index.shard_bytes},
                   {"end_offset", index.end_offset}, {"keys", index.keys}, {"offsets", index.offsets}};
  if (index.damage) j["damage"] = *index.damage;
  const fs::path path = index_path(index.shard);
  const fs::path temp(path.string() + ".tmp");
  detail::write_file_synced(temp, j.dump());
  fs::rename(temp, path);
}

namespace {

std::optional<ShardIndex> read_index_file(const fs::path& shard, int64_t shard_bytes) {
  const fs::path path = index_path(shard);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("format") != "frugal.shard_index" || j.at("version") != 1) return std::nullopt;
    ShardIndex index;
    index.shard = shard;
    index.shard_bytes = j.at("shard_bytes").get<int64_t>();
    if (index.shard_bytes != shard_bytes) return std::nullopt;  // the shard was rewritten
    index.end_offset = j.at("end_offset").get<int64_t>();
    index.keys = j.at("keys").get<std::vector<std::string>>();
    index.offsets = j.at("offsets").get<std::vector<int64_t>>();
    if (j.contains("damage")) index.damage = j.at("damage").get<std::string>();
    const bool sane = index.keys.size() == index.offsets.size() && index.end_offset <= shard_bytes &&
                      std::is_sorted(index.offsets.begin(), index.offsets.end()) &&
                      (index.offsets.empty() || (index.offsets.front() >= 0 && index.offsets.back() < index.end_offset));
    if (!sane) throw DataError(path.string(), -1, "inconsistent offsets");
    return index;
  } catch (const std::exception& e) {
    log::warn(c10::str("rebuilding the shard index ", path.string(), ": it is unreadable (", e.what(), ")"));
    return std::nullopt;
  }
}

}  // namespace

ShardIndex load_shard_index(const fs::path& shard, OnCorrupt on_corrupt, bool write) {
  std::error_code error;
  const auto bytes = fs::file_size(shard, error);
  if (error) throw DataError(shard.string(), -1, "cannot read shard: " + error.message());
  if (auto index = read_index_file(shard, static_cast<int64_t>(bytes))) {
    if (!index->damage || on_corrupt == OnCorrupt::skip) return *index;
  }
  ShardIndex index = build_shard_index(shard, on_corrupt);
  if (write) {
    try {
      save_shard_index(index);
    } catch (const std::exception& e) {  // a read-only data set is fine: the index stays in memory
      log::debug(c10::str("not writing a shard index: ", e.what()));
    }
  }
  return index;
}

Sample read_indexed_sample(const ShardIndex& index, int64_t i) {
  if (i < 0 || i >= index.size()) throw Error(c10::str("sample ", i, " is outside shard ", index.shard.string()));
  const int64_t begin = index.offsets[static_cast<size_t>(i)];
  const int64_t end = index.sample_end(i);
  const auto span_size = static_cast<size_t>(end - begin);
  const std::unique_ptr<char[]> span(new char[span_size]);  // not zero-filled: pread overwrites it
  const int fd = ::open(index.shard.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_system(index.shard, "cannot open shard");
  size_t done = 0;
  while (done < span_size) {
    const ssize_t got = ::pread(fd, span.get() + done, span_size - done, static_cast<off_t>(begin + done));
    if (got <= 0) {
      ::close(fd);
      if (got < 0) throw_system(index.shard, "read failed");
      throw DataError(index.shard.string(), begin + static_cast<int64_t>(done),
                      "shard is shorter than its index says (truncated after indexing?)");
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);

  struct archive* a = detail::new_tar_reader();
  struct Free {
    struct archive* a;
    ~Free() { archive_read_free(a); }
  } free_archive{a};
  if (archive_read_open_memory(a, span.get(), span_size) != ARCHIVE_OK) {
    throw DataError(index.shard.string(), begin, "cannot read sample: " + archive_reason(a));
  }
  Sample sample;
  sample.key = index.keys[static_cast<size_t>(i)];
  detail::TarMember member;
  while (detail::read_tar_member(a, index.shard, begin, member)) {
    auto [key, ext] = split_member_name(member.name);
    if (key != sample.key) {
      if (sample.fields.empty()) {
        throw DataError(index.shard.string(), member.offset,
                        "expected sample '" + sample.key + "' but found '" + key + "': the index is stale");
      }
      break;  // the next sample starts here
    }
    sample.fields.emplace(std::move(ext), std::move(member.bytes));
  }
  if (sample.fields.empty()) throw DataError(index.shard.string(), begin, "sample '" + sample.key + "' has no members");
  return sample;
}

std::vector<fs::path> list_shards(const fs::path& directory) {
  if (fs::is_regular_file(directory)) return {directory};
  if (!fs::is_directory(directory)) throw DataError(directory.string(), -1, "no such shard directory");
  std::vector<fs::path> shards;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.is_regular_file() && entry.path().extension() == ".tar") shards.push_back(entry.path());
  }
  std::sort(shards.begin(), shards.end());
  if (shards.empty()) throw DataError(directory.string(), -1, "holds no *.tar shards");
  return shards;
}

}  // namespace frugal
