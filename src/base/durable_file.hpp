#pragma once
// A file written once, front to back, straight from the writer's memory (no intermediate copy),
// its XXH3-64 checksum computed over each piece as it goes by (one pass), pieces gathered into
// large writes, then fsynced. A write error is kept and thrown by finish() (CheckpointError naming
// the file): never from inside a serializer's callback, which LibTorch's writer cannot unwind.
//
//   DurableFile file(dir / "state.pt");
//   archive.save_to(file.writer());
//   const auto [size, xxh3] = file.finish();

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

namespace frugal::detail {

class DurableFile {
 public:
  explicit DurableFile(std::filesystem::path path);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, size_t size);
  /// For torch::serialize::OutputArchive::save_to: appends, always reports every byte taken.
  std::function<size_t(const void*, size_t)> writer();
  struct Written {
    uint64_t size;
    uint64_t xxh3;
  };
  /// Flushes, fsyncs and closes; throws CheckpointError naming the file if any write failed.
  Written finish();

 private:
  void flush();
  void write_through(const char* data, size_t size);

  std::filesystem::path path_;
  int fd_ = -1;
  std::string buffer_;  // small pieces wait here; large ones go straight to the file
  uint64_t size_ = 0;
  uint64_t written_ = 0, started_ = 0;  // bytes handed to the kernel, and those whose writeback began
  struct Hash;  // XXH3's streaming state (durable_file.cpp: xxHash header-only)
  std::unique_ptr<Hash> hash_;
  std::string error_;
};

/// XXH3-64 of a whole file (reading it in large pieces), as its manifest records it.
uint64_t xxh3_of_file(const std::filesystem::path& path);
/// 16 lowercase hex digits, as manifests write it.
std::string hex64(uint64_t value);

}  // namespace frugal::detail
