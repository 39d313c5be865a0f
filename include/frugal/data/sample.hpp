#pragma once
// One sample of a sharded dataset in the WebDataset layout: the tar members that share a key.
// "train/000123.jpg" and "train/000123.cls" form the sample with key "train/000123" and the
// fields "jpg" and "cls". The key is the member path up to the first '.' of its last component.
//
//   frugal::Sample s{"000123", {{"jpg", jpeg_bytes}, {"cls", "7"}}};
//   const std::string& jpeg = s.field("jpg");   // DataError naming the key if absent

#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace frugal {

struct Sample {
  std::string key;
  /// Extension ("jpg", "cls", "aug0.npy") → the member's bytes.
  std::map<std::string, std::string> fields;

  /// The bytes of field `extension`; throws DataError naming the key and the fields it has.
  const std::string& field(const std::string& extension) const;
  bool has(const std::string& extension) const { return fields.count(extension) != 0; }
};

/// Splits a member path into (key, extension) the way WebDataset does; the extension is empty
/// when the last component has no '.'.
std::pair<std::string, std::string> split_member_name(std::string_view name);

/// True for a member path that could escape the directory it is extracted to: absolute, or
/// with a ".." component.
bool is_unsafe_member_name(std::string_view name);

}  // namespace frugal
