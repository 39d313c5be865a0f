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

#include "base/durable_io.hpp"
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

// Every file of a built entry with its size, so a hit can tell a whole entry from one that was
// truncated or partly deleted since (a full disk, a user's cleanup) and rebuild it.
nlohmann::json files_of(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (f.is_regular_file()) files[fs::relative(f.path(), dir).string()] = f.file_size();
  }
  return files;
}

// "" when every listed file is there with its size, else what is wrong.
std::string damage_of(const fs::path& dir, const nlohmann::json& files) {
  for (const auto& [name, size] : files.items()) {
    std::error_code error;
    const auto actual = fs::file_size(dir / name, error);
    if (error) return name + " is missing";
    if (actual != size.get<uintmax_t>()) return c10::str(name, " is ", actual, " bytes, ", size.get<uintmax_t>(), " when built");
  }
  return "";
}

}  // namespace

PreprocessCache::Entry PreprocessCache::get_or_build(const CacheKey& key,
                                                     const std::function<void(const fs::path&)>& build) const {
  Entry entry{root_ / key.digest(), false, key.digest()};
  const fs::path manifest = entry.dir / "cache.json";
  const EntryLock lock(root_ / (entry.digest + ".lock"));
  if (fs::exists(manifest)) {
    try {
      std::ifstream in(manifest);
      nlohmann::json stored = nlohmann::json::parse(in);
      const nlohmann::json files = stored.contains("files") ? stored["files"] : nlohmann::json();
      stored.erase("files");
      if (stored != manifest_of(key) || !files.is_object()) {
        log::warn(c10::str("preprocessing cache entry ", entry.dir.string(), " belongs to another key: rebuilding it"));
      } else if (const std::string damage = damage_of(entry.dir, files); !damage.empty()) {
        log::warn(c10::str("preprocessing cache entry ", entry.dir.string(), " is damaged (", damage, "): rebuilding it"));
      } else {
        entry.hit = true;
        log::info(c10::str("preprocessing cache hit: ", key.transform, " v", key.version, " in ", entry.dir.string()));
        return entry;
      }
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
    nlohmann::json written = manifest_of(key);
    written["files"] = files_of(partial);
    detail::write_file_synced(partial / "cache.json", written.dump(2));
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
