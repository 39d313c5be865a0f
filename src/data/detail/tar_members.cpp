#include "data/detail/tar_members.hpp"

#include <archive.h>
#include <archive_entry.h>

#include "frugal/data/sample.hpp"
#include "frugal/errors.hpp"

namespace frugal::detail {

struct archive* new_tar_reader() {
  struct archive* a = archive_read_new();
  if (a == nullptr) throw Error("libarchive: out of memory");
  archive_read_support_format_tar(a);
  return a;
}

bool read_tar_member(struct archive* a, const std::filesystem::path& file, int64_t base_offset, TarMember& out) {
  out.name.clear();
  for (;;) {
    struct archive_entry* entry = nullptr;
    const int status = archive_read_next_header(a, &entry);
    // After a fatal error libarchive no longer reports the header position; the bytes its tar
    // reader consumed are then where the bad header starts.
    const la_int64_t header = archive_read_header_position(a);
    const int64_t offset = base_offset + (header >= 0 && status >= ARCHIVE_WARN ? header : archive_filter_bytes(a, 0));
    out.offset = offset;
    if (status == ARCHIVE_EOF) return false;
    if (status != ARCHIVE_OK && status != ARCHIVE_WARN) {  // RETRY too: a damaged header
      const char* why = archive_error_string(a);
      throw DataError(file.string(), offset, std::string("corrupt or truncated tar: ") + (why ? why : "unknown error"));
    }
    const char* path = archive_entry_pathname(entry);
    const std::string name = path ? path : "";
    const auto type = archive_entry_filetype(entry);
    if (type == AE_IFDIR) continue;
    if (is_unsafe_member_name(name)) {
      throw DataError(file.string(), offset, "member '" + name + "' has an unsafe path (empty, absolute or with '..')");
    }
    if (type != AE_IFREG) {
      throw DataError(file.string(), offset, "member '" + name + "' is not a regular file (links and devices are refused)");
    }
    const la_int64_t size = archive_entry_size(entry);
    if (size < 0) throw DataError(file.string(), offset, "member '" + name + "' has no size");
    out.name = name;
    // Blocks straight from libarchive's buffer: one copy, no zero-fill of the destination. The
    // reserve trusts the header only so far: a size field can claim 2^62 bytes in a 1 KB file.
    out.bytes.clear();
    out.bytes.reserve(static_cast<size_t>(std::min<la_int64_t>(size, la_int64_t{64} << 20)));
    const void* block = nullptr;
    size_t length = 0;
    la_int64_t at = 0;
    int read_status = ARCHIVE_OK;
    while ((read_status = archive_read_data_block(a, &block, &length, &at)) == ARCHIVE_OK) {
      if (at != static_cast<la_int64_t>(out.bytes.size())) {
        throw DataError(file.string(), offset, "member '" + name + "' is sparse (not supported in a shard)");
      }
      out.bytes.append(static_cast<const char*>(block), length);
    }
    if (read_status != ARCHIVE_EOF) {
      const char* why = archive_error_string(a);
      throw DataError(file.string(), offset,
                      "member '" + name + "': corrupt or truncated data: " + (why ? why : "unknown error"));
    }
    if (out.bytes.size() != static_cast<size_t>(size)) {
      throw DataError(file.string(), offset, "member '" + name + "': truncated after " + std::to_string(out.bytes.size()) +
                                                 " of " + std::to_string(size) + " bytes");
    }
    return true;
  }
}

}  // namespace frugal::detail
