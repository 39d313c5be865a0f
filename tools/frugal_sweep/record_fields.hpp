#pragma once
// The type check shared by frugal-sweep's readers of its own records (result.json, queue job
// files): a hand edit or a full disk may leave a field of another type than the reader expects.

#include <initializer_list>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace frugal::sweep {

/// "<key> is not a string" for the first of `strings` present with another type, then likewise
/// for `numbers`; nullopt when every present field has its type (absent ones are not checked).
inline std::optional<std::string> mistyped_field(const nlohmann::json& record, std::initializer_list<const char*> strings,
                                                 std::initializer_list<const char*> numbers) {
  for (const char* key : strings) {
    if (const auto it = record.find(key); it != record.end() && !it->is_string()) return std::string(key) + " is not a string";
  }
  for (const char* key : numbers) {
    if (const auto it = record.find(key); it != record.end() && !it->is_number()) return std::string(key) + " is not a number";
  }
  return std::nullopt;
}

}  // namespace frugal::sweep
