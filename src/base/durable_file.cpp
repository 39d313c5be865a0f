#include "durable_file.hpp"

#define XXH_INLINE_ALL  // header-only, as in the data pipeline
#include <xxhash.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/durable_io.hpp"
#include "frugal/errors.hpp"

namespace frugal::detail {
namespace {
// Pieces below this wait in the buffer; the buffer goes out when it reaches it. Large enough that
// the disk sees few, long writes; small enough to stay in the last-level cache.
constexpr size_t kChunk = size_t{8} << 20;
}  // namespace

struct DurableFile::Hash {
  XXH3_state_t state;
};

DurableFile::DurableFile(std::filesystem::path path) : path_(std::move(path)), hash_(std::make_unique<Hash>()) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CheckpointError("cannot open '" + path_.string() + "': " + std::strerror(errno));
  XXH3_64bits_reset(&hash_->state);
  buffer_.reserve(kChunk);
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write_through(const char* data, size_t size) {
  while (size > 0 && error_.empty()) {
    const ssize_t n = ::write(fd_, data, std::min(size, kChunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = std::strerror(errno);
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
    // The disk starts on what is written while the serializer makes the rest: by finish()'s
    // fsync little is left to wait for (the write then runs at the disk's speed, not after it).
    if (written_ - started_ >= kChunk) {
      ::sync_file_range(fd_, static_cast<off64_t>(started_), static_cast<off64_t>(written_ - started_), SYNC_FILE_RANGE_WRITE);
      started_ = written_;
    }
  }
}

void DurableFile::flush() {
  write_through(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void DurableFile::write(const void* data, size_t size) {
  if (!error_.empty() || size == 0) return;
  XXH3_64bits_update(&hash_->state, data, size);  // fused with the write: the bytes are read once
  size_ += size;
  const char* bytes = static_cast<const char*>(data);
  if (buffer_.size() + size <= kChunk) {
    buffer_.append(bytes, size);
    if (buffer_.size() == kChunk) flush();
    return;
  }
  flush();
  if (size >= kChunk) {
    write_through(bytes, size);  // a tensor's bytes: straight from its memory
  } else {
    buffer_.append(bytes, size);
  }
}

std::function<size_t(const void*, size_t)> DurableFile::writer() {
  return [this](const void* data, size_t size) {
    write(data, size);
    return size;
  };
}

DurableFile::Written DurableFile::finish() {
  flush();
  if (error_.empty() && ::fsync(fd_) != 0) error_ = std::string("fsync: ") + std::strerror(errno);
  if (::close(fd_) != 0 && error_.empty()) error_ = std::string("close: ") + std::strerror(errno);
  fd_ = -1;
  if (!error_.empty()) throw CheckpointError("cannot write '" + path_.string() + "': " + error_);
  return {size_, XXH3_64bits_digest(&hash_->state)};
}

uint64_t xxh3_of_file(const std::filesystem::path& path) {
  auto state = std::make_unique<XXH3_state_t>();
  XXH3_64bits_reset(state.get());
  read_in_pieces(path, [&](const char* data, size_t size) { XXH3_64bits_update(state.get(), data, size); });
  return XXH3_64bits_digest(state.get());
}

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace frugal::detail
