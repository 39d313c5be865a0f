#pragma once
// One step of reading a tar with libarchive: the next regular member, its name checked, its
// bytes read whole. Shared by the sequential scanner and the indexed (random access) reader.

#include <cstdint>
#include <filesystem>
#include <string>

struct archive;

namespace frugal::detail {

struct TarMember {
  std::string name;
  std::string bytes;
  int64_t offset = 0;  // of its first header in the shard file
};

/// A tar reader (format tar only: no auto-detection of other formats).
struct archive* new_tar_reader();
/// Reads the next regular member (directories are passed over). Returns false at the end.
/// Throws DataError(file, offset) on a corrupt or truncated archive, an unsafe name, or a
/// member that is a link or device. `base_offset` is added to libarchive's positions (a
/// reader opened on a span of the file). When it throws, `out` still says which member failed:
/// its offset, and its name if the header was read.
bool read_tar_member(struct archive* archive, const std::filesystem::path& file, int64_t base_offset, TarMember& out);

}  // namespace frugal::detail
