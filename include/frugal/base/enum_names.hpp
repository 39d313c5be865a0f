#pragma once
// One text table per enum, used for printing, parsing and config binding alike. An enum gets its
// table from a constexpr function `names_of(E)`, declared next to it and found by argument-
// dependent lookup:
//
//   enum class ClipMode { off, norm, value };
//   constexpr std::array<EnumName<ClipMode>, 3> names_of(ClipMode) {
//     return {{{ClipMode::off, "off"}, {ClipMode::norm, "norm"}, {ClipMode::value, "value"}}};
//   }
//   frugal::to_string(ClipMode::norm);            // "norm"
//   frugal::parse_enum<ClipMode>("value");         // ClipMode::value; nullopt for an unknown name
//   frugal::parse_enum_option<ClipMode>(text, "clipping.mode");  // or OptionError naming the key
//   config.bind_enum("clipping.mode", field, "help");  // choices from the same table

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "frugal/errors.hpp"

namespace frugal {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) { names_of(e); };

template <NamedEnum E>
std::string to_string(E value) {
  for (const auto& entry : names_of(E{})) {
    if (entry.value == value) return std::string(entry.name);
  }
  return "?";
}

template <NamedEnum E>
std::optional<E> parse_enum(std::string_view text) {
  for (const auto& entry : names_of(E{})) {
    if (entry.name == text) return entry.value;
  }
  return std::nullopt;
}

/// The names, in table order ("fp32, fp16, bf16" for messages, choices for the config).
template <NamedEnum E>
std::vector<std::string> enum_choices() {
  std::vector<std::string> out;
  for (const auto& entry : names_of(E{})) out.emplace_back(entry.name);
  return out;
}

/// `text` as an E, or OptionError naming `key`: "<key> must be one of a, b, c; got 'x'".
template <NamedEnum E>
E parse_enum_option(std::string_view text, const std::string& key) {
  if (const std::optional<E> value = parse_enum<E>(text)) return *value;
  std::string allowed;
  for (const auto& name : enum_choices<E>()) allowed += (allowed.empty() ? "" : ", ") + name;
  throw OptionError(key, key + " must be one of " + allowed + "; got '" + std::string(text) + "'");
}

}  // namespace frugal
