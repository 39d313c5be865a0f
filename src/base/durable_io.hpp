#pragma once
// File operations that survive a crash: write + fsync, fsync of a directory (so a rename or a
// new entry is on disk), and the CRC-32 (zlib) of a file. Errors throw CheckpointError naming
// the file and the system's reason.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace frugal::detail {

/// Writes and fsyncs `bytes`; returns their CRC-32, computed from memory (no read-back).
uint32_t write_file_synced(const std::filesystem::path& path, const std::string& bytes);
uint32_t crc32_of(const std::string& bytes);
void fsync_file(const std::filesystem::path& path);
void fsync_directory(const std::filesystem::path& path);
std::string read_file(const std::filesystem::path& path);
uint32_t crc32_of_file(const std::filesystem::path& path);
/// Hands the file's bytes to `take` front to back, 8 MB at a time (checksumming a whole file).
void read_in_pieces(const std::filesystem::path& path, const std::function<void(const char*, size_t)>& take);

}  // namespace frugal::detail
