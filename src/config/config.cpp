#include "frugal/config/config.hpp"

#include <toml++/toml.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

namespace frugal {
namespace {

// A TOML basic string literal.
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int64_t parse_integer(const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) throw ConfigError("expects an integer, got '" + text + "'");
  return value;
}

double parse_real(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  // nan and inf are numbers too (nan switches off the early-stopping thresholds).
  if (text.empty() || end != text.c_str() + text.size()) throw ConfigError("expects a number, got '" + text + "'");
  return value;
}

bool parse_bool(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  throw ConfigError("expects true or false, got '" + text + "'");
}

std::string format_real(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream out;
  out << std::setprecision(17) << v;
  std::string s = out.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

// A TOML node as the text apply_text() parses, so every layer goes through one parser; the
// node's type must already fit the entry's type.
std::string node_as_text(const toml::node& node, ValueType type) {
  switch (type) {
    case ValueType::boolean:
      if (auto v = node.value_exact<bool>()) return *v ? "true" : "false";
      throw ConfigError("expects true or false");
    case ValueType::integer:
      if (auto v = node.value_exact<int64_t>()) return std::to_string(*v);
      throw ConfigError("expects an integer");
    case ValueType::real:
      if (node.is_integer() || node.is_floating_point()) return format_real(*node.value<double>());
      throw ConfigError("expects a number");
    case ValueType::string:
      if (auto v = node.value_exact<std::string>()) return *v;
      throw ConfigError("expects a string");
  }
  throw ConfigError("unsupported type");
}

std::string describe_node(const toml::node& node) {
  if (node.is_table()) return "a table";
  if (node.is_array()) return "an array";
  if (auto v = node.value_exact<std::string>()) return "string " + toml_string(*v);
  if (auto v = node.value_exact<bool>()) return *v ? "true" : "false";
  if (auto v = node.value_exact<int64_t>()) return std::to_string(*v);
  if (auto v = node.value_exact<double>()) return format_real(*v);
  return "a date or time";
}

}  // namespace

Config::Entry& Config::add(const std::string& key, ValueType type, std::string help) {
  const auto dot = key.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == key.size() || key.find('.', dot + 1) != std::string::npos) {
    throw ConfigError("config key '" + key + "' must have the form section.name");
  }
  if (has(key)) throw ConfigError("config key '" + key + "' is bound twice");
  index_[key] = entries_.size();
  entries_.push_back(Entry{key, type, std::move(help), {}, {}, {}, "default"});
  return entries_.back();
}

void Config::bind(const std::string& key, bool& field, std::string help) {
  Entry& e = add(key, ValueType::boolean, std::move(help));
  e.assign_text = [&field](const std::string& text) { field = parse_bool(text); };
  e.current_toml = [&field] { return std::string(field ? "true" : "false"); };
}

void Config::bind(const std::string& key, int64_t& field, std::string help) {
  Entry& e = add(key, ValueType::integer, std::move(help));
  e.assign_text = [&field](const std::string& text) { field = parse_integer(text); };
  e.current_toml = [&field] { return std::to_string(field); };
}

void Config::bind(const std::string& key, double& field, std::string help) {
  Entry& e = add(key, ValueType::real, std::move(help));
  // A finite default makes the option a quantity: nan or inf there would reach LibTorch (a
  // learning rate of nan) or train to NaN. Options whose default is nan use it as "off" and keep it.
  const bool finite_only = std::isfinite(field);
  e.assign_text = [&field, finite_only](const std::string& text) {
    const double value = parse_real(text);
    if (finite_only && !std::isfinite(value)) throw ConfigError("expects a finite number, got '" + text + "'");
    field = value;
  };
  e.current_toml = [&field] { return format_real(field); };
}

void Config::bind(const std::string& key, std::string& field, std::string help, std::vector<std::string> choices) {
  Entry& e = add(key, ValueType::string, std::move(help));
  e.choices = choices;
  e.assign_text = [&field, choices](const std::string& text) {
    if (!choices.empty() && std::find(choices.begin(), choices.end(), text) == choices.end()) {
      std::string allowed;
      for (const auto& c : choices) allowed += (allowed.empty() ? "" : ", ") + c;
      throw ConfigError("must be one of " + allowed + ", got '" + text + "'");
    }
    field = text;
  };
  e.current_toml = [&field] { return toml_string(field); };
}

void Config::add_environment_alias(const std::string& variable, const std::string& key) {
  if (!has(key)) throw ConfigError("environment alias " + variable + " names unknown key '" + key + "'");
  aliases_[variable] = key;
}

void Config::add_check(const std::string& section, std::function<void()> validate) {
  checks_.emplace_back(section, std::move(validate));
}

const std::string& Config::source_of(const std::string& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) throw ConfigError("unknown config key '" + key + "'");
  return entries_[it->second].source;
}

std::string Config::environment_name(const std::string& key) {
  std::string name = "FRUGAL_";
  for (char c : key) name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

Config::Entry& Config::entry(const std::string& key, const std::string& source) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    std::string hint;
    const std::string section = section_of(key);
    for (const auto& e : entries_) {
      if (section_of(e.key) == section) hint += (hint.empty() ? "" : ", ") + e.key;
    }
    throw ConfigError("unknown config key '" + key + "' in " + source +
                      (hint.empty() ? " (no such section)" : " (known in this section: " + hint + ")"));
  }
  return entries_[it->second];
}

void Config::apply_text(const std::string& key, const std::string& text, const std::string& source) {
  Entry& e = entry(key, source);
  try {
    e.assign_text(text);
  } catch (const ConfigError& error) {
    throw ConfigError("bad value for '" + key + "' in " + source + ": " + error.what());
  }
  e.source = source;
}

void Config::apply_environment(const std::vector<std::string>& environment) {
  std::map<std::string, std::string> key_of_variable;
  std::set<std::string> section_prefixes;
  for (const auto& e : entries_) {
    key_of_variable[environment_name(e.key)] = e.key;
    section_prefixes.insert(environment_name(section_of(e.key) + "."));  // FRUGAL_TRAINER_
  }
  // Aliases first, so the long name wins when both are set.
  std::vector<std::pair<std::string, std::string>> ordered;
  for (const auto& assignment : environment) {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos || assignment.rfind("FRUGAL_", 0) != 0) continue;
    std::pair<std::string, std::string> item{assignment.substr(0, eq), assignment.substr(eq + 1)};
    if (aliases_.count(item.first)) {
      ordered.insert(ordered.begin(), item);
    } else {
      ordered.push_back(item);
    }
  }
  for (const auto& [name, value] : ordered) {
    if (auto alias = aliases_.find(name); alias != aliases_.end()) {
      apply_text(alias->second, value, "environment variable " + name);
      continue;
    }
    auto it = key_of_variable.find(name);
    if (it != key_of_variable.end()) {
      apply_text(it->second, value, "environment variable " + name);
      continue;
    }
    for (const auto& prefix : section_prefixes) {
      if (name.rfind(prefix, 0) == 0) {
        throw ConfigError("unknown config key in environment variable " + name + "=" + value +
                          " (no key of section " + prefix.substr(7, prefix.size() - 8) + " has that name)");
      }
    }
  }
}

void Config::apply_file(const std::filesystem::path& path) {
  const std::string file = path.string();
  if (!std::filesystem::exists(path)) throw ConfigError("config file '" + file + "' does not exist");
  toml::table root;
  try {
    root = toml::parse_file(file);
  } catch (const toml::parse_error& error) {
    const auto& where = error.source().begin;
    throw ConfigError("config file " + file + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                      ": " + std::string(error.description()));
  }
  for (const auto& [section, node] : root) {
    const auto& where = node.source().begin;
    const std::string at = file + ":" + std::to_string(where.line) + ":" + std::to_string(where.column);
    const toml::table* table = node.as_table();
    if (!table) {
      throw ConfigError("config file " + at + ": top-level key '" + std::string(section.str()) +
                        "' must be a [section] table");
    }
    for (const auto& [name, value] : *table) {
      const std::string key = std::string(section.str()) + "." + std::string(name.str());
      const auto& vwhere = value.source().begin;
      const std::string source = "config file " + file + ":" + std::to_string(vwhere.line) + ":" + std::to_string(vwhere.column);
      Entry& e = entry(key, source);
      std::string text;
      try {
        text = node_as_text(value, e.type);
      } catch (const ConfigError& error) {
        throw ConfigError("bad value for '" + key + "' in " + source + ": " + error.what() + ", got " + describe_node(value));
      }
      apply_text(key, text, source);
    }
  }
}

void Config::validate() const {
  for (const auto& [section, check] : checks_) {
    try {
      check();
    } catch (const OptionError& error) {
      const std::string key = section + "." + error.option();
      if (!has(key)) throw ConfigError("[" + section + "] " + error.what());
      const Entry& e = entries_[index_.at(key)];
      throw ConfigError("bad value for '" + key + "' = " + e.current_toml() + " from " + e.source + ": " + error.what());
    }
  }
}

std::string Config::to_toml() const {
  std::ostringstream out;
  out << "# Resolved configuration: each value with where it came from.\n";
  // One table per section, in the order sections first appear: a section's keys may be bound in
  // several places (the standard options' [optimizer] keys and a program's own), and TOML refuses
  // a table defined twice.
  std::vector<std::string> sections;
  for (const auto& e : entries_) {
    const std::string s = section_of(e.key);
    if (std::find(sections.begin(), sections.end(), s) == sections.end()) sections.push_back(s);
  }
  for (size_t i = 0; i < sections.size(); ++i) {
    out << (i == 0 ? "" : "\n") << "[" << sections[i] << "]\n";
    for (const auto& e : entries_) {
      if (section_of(e.key) == sections[i]) out << e.key.substr(sections[i].size() + 1) << " = " << e.current_toml() << "  # " << e.source << "\n";
    }
  }
  return out.str();
}

void write_text_file_atomically(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) throw Error("cannot write '" + tmp.string() + "'");
  }
  std::filesystem::rename(tmp, path);
}

void Config::write_resolved(const std::filesystem::path& path) const { write_text_file_atomically(path, to_toml()); }

std::map<std::string, std::string> flatten_toml(const std::string& text) {
  std::map<std::string, std::string> out;
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error& e) {
    throw ConfigError(std::string("resolved configuration does not parse: ") + std::string(e.description()));
  }
  std::function<void(const toml::table&, const std::string&)> walk = [&](const toml::table& table, const std::string& prefix) {
    for (const auto& [key, node] : table) {
      const std::string name = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
      if (const auto* inner = node.as_table()) {
        walk(*inner, name);
        continue;
      }
      if (const auto* number = node.as_floating_point()) {  // the shortest text that reads back the same
        char text[64];
        const auto end = std::to_chars(text, text + sizeof text, number->get()).ptr;
        out[name] = std::string(text, end);
        continue;
      }
      std::ostringstream value;
      node.visit([&](const auto& v) { value << v; });
      out[name] = value.str();
    }
  };
  walk(root, "");
  return out;
}

}  // namespace frugal
