#include "frugal/data/preprocess_cache.hpp"

#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/detail/durable_io.hpp"
#include "data/detail/content_hash.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace fs = std::filesystem;
namespace {

nlohmann::json manifest_of(const CacheKey& key) {
  return {{"transform", key.transform}, {"version", key.version}, {"config", key.config}, {"source", key.source}};
}

}  // namespace

std::string fingerprint_files(const std::vector<fs::path>& files, Fingerprint how) {
  detail::ContentHash hasher;
  std::vector<char> buffer(size_t{1} << 20);
  for (const auto& file : files) {
    hasher.add_part(file.filename().string());
    std::error_code error;
    const auto size = fs::file_size(file, error);
    if (error) throw DataError(file.string(), -1, "cannot fingerprint: " + error.message());
    if (how == Fingerprint::metadata) {
      const auto mtime = fs::last_write_time(file).time_since_epoch().count();
      hasher.add_part(c10::str(fs::absolute(file).string(), " ", size, " ", mtime));
      continue;
    }
    std::ifstream in(file, std::ios::binary);
    if (!in) throw DataError(file.string(), -1, "cannot open to fingerprint");
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      hasher.add(buffer.data(), static_cast<size_t>(in.gcount()));
    }
  }
  return hasher.hex();
}

std::string CacheKey::digest() const {
  detail::ContentHash hasher;
  for (const auto& part : {transform, std::to_string(version), config, source}) hasher.add_part(part);
  return hasher.hex();
}

PreprocessCache::PreprocessCache(fs::path root) : root_(std::move(root)) {
  if (root_.empty()) throw OptionError("root", "PreprocessCache: the cache directory is empty");
  fs::create_directories(root_);
}

namespace {

// An exclusive flock on "<digest>.lock" for the time of a lookup and build: processes that want
// the same entry (the ranks of one job on a node, or on a shared file system) build it once;
// the others wait and then find it. Released when the process dies, so no stale lock remains.
class EntryLock {
 public:
  explicit EntryLock(const fs::path& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw DataError(path.string(), -1, std::string("cannot create the cache lock: ") + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      log::info(c10::str("preprocessing cache: waiting for another process building ", path.stem().string()));
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~EntryLock() { ::close(fd_); }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

 private:
  int fd_;
};

}  // namespace

PreprocessCache::Entry PreprocessCache::get_or_build(const CacheKey& key,
                                                     const std::function<void(const fs::path&)>& build) const {
  Entry entry{root_ / key.digest(), false, key.digest()};
  const fs::path manifest = entry.dir / "cache.json";
  const EntryLock lock(root_ / (entry.digest + ".lock"));
  if (fs::exists(manifest)) {
    try {
      std::ifstream in(manifest);
      if (nlohmann::json::parse(in) == manifest_of(key)) {
        entry.hit = true;
        log::info(c10::str("preprocessing cache hit: ", key.transform, " v", key.version, " in ", entry.dir.string()));
        return entry;
      }
      log::warn(c10::str("preprocessing cache entry ", entry.dir.string(), " belongs to another key: rebuilding it"));
    } catch (const nlohmann::json::exception& e) {
      log::warn(c10::str("preprocessing cache entry ", manifest.string(), " is unreadable (", e.what(), "): rebuilding it"));
    }
    fs::remove_all(entry.dir);
  }
  log::info(c10::str("preprocessing cache miss: building ", key.transform, " v", key.version, " into ", entry.dir.string()));
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  const fs::path partial = root_ / c10::str(entry.digest, ".partial-", ::getpid(), "-", stamp);
  fs::create_directories(partial);
  try {
    build(partial);
    detail::write_file_synced(partial / "cache.json", manifest_of(key).dump(2));
    detail::fsync_directory(partial);
    std::error_code error;
    fs::rename(partial, entry.dir, error);
    if (error) {
      // A file system without working flock let another process publish first: theirs is as good.
      if (!fs::exists(manifest)) throw DataError(entry.dir.string(), -1, "cannot publish cache entry: " + error.message());
      fs::remove_all(partial);
    }
    detail::fsync_directory(root_);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    throw;
  }
  return entry;
}

}  // namespace frugal
