#include "durable_io.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "frugal/errors.hpp"

namespace frugal::detail {
namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path) {
  throw CheckpointError(what + " '" + path.string() + "': " + std::strerror(errno));
}

class Fd {
 public:
  Fd(const std::filesystem::path& path, int flags, mode_t mode = 0644) : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (fd_ < 0) fail("cannot open", path);
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

uint32_t crc32_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - done, 1u << 30);  // zlib takes uInt lengths
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t write_file_synced(const std::filesystem::path& path, const std::string& bytes) {
  Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail("cannot fsync", path);
  return crc32_of(bytes);
}

void fsync_file(const std::filesystem::path& path) {
  Fd fd(path, O_RDONLY);
  if (::fsync(fd.get()) != 0) fail("cannot fsync", path);
}

void fsync_directory(const std::filesystem::path& path) {
  Fd fd(path, O_RDONLY | O_DIRECTORY);
  if (::fsync(fd.get()) != 0) fail("cannot fsync directory", path);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot read '" + path.string() + "'");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

uint32_t crc32_of_file(const std::filesystem::path& path) {
  uLong crc = crc32(0L, Z_NULL, 0);
  read_in_pieces(path, [&](const char* data, size_t size) { crc = crc32(crc, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)); });
  return static_cast<uint32_t>(crc);
}

void read_in_pieces(const std::filesystem::path& path, const std::function<void(const char*, size_t)>& take) {
  const Fd fd(path, O_RDONLY);
  std::vector<char> buffer(size_t{8} << 20);
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read", path);
    if (n == 0) return;
    take(buffer.data(), static_cast<size_t>(n));
  }
}

}  // namespace frugal::detail
