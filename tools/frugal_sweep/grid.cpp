#include "grid.hpp"

#include <toml++/toml.hpp>

#include <cstdio>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace frugal::sweep {
namespace {

constexpr size_t kMaxCells = 10000;           // each cell is a run of its own: more is a typo
constexpr size_t kMaxDirectoryName = 120;     // the caller adds "NN-" in front

bool valid_key(const std::string& key) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == key.size()) return false;
  for (char c : key) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  }
  return true;
}

std::string toml_value_text(const toml::node& node, const std::string& where) {
  if (auto s = node.value<std::string>()) return *s;
  if (node.is_boolean()) return *node.value<bool>() ? "true" : "false";
  if (node.is_integer()) return std::to_string(*node.value<int64_t>());
  if (node.is_floating_point()) {
    std::ostringstream out;
    out << *node.value<double>();
    return out.str();
  }
  throw std::invalid_argument(where + ": values must be strings, numbers or booleans");
}

}  // namespace

std::string Cell::label() const {
  std::string out;
  for (const auto& [k, v] : settings) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out.empty() ? "(defaults)" : out;
}

std::string Cell::directory_name() const {
  std::string out;
  for (const auto& [k, v] : settings) {
    std::string part = k + "-" + v;
    for (char& c : part) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
    }
    out += (out.empty() ? "" : "__") + part;
  }
  if (out.empty()) return "defaults";
  // A file name has at most 255 bytes: a long one keeps its start and a hash of the whole.
  if (out.size() > kMaxDirectoryName) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(out));
    out = out.substr(0, kMaxDirectoryName - 18) + "~" + hash;
  }
  return out;
}

void Grid::add_axis(Axis axis, const std::string& source) {
  if (!valid_key(axis.key)) throw std::invalid_argument(source + ": '" + axis.key + "' is not a config key (section.name)");
  if (axis.values.empty()) throw std::invalid_argument(source + ": no values for " + axis.key);
  std::set<std::string> seen;
  for (const auto& v : axis.values) {
    if (!seen.insert(v).second) throw std::invalid_argument(source + ": " + axis.key + " lists '" + v + "' twice");
  }
  for (const auto& a : axes_) {
    if (a.key == axis.key) throw std::invalid_argument(source + ": " + axis.key + " is already a grid axis");
  }
  axes_.push_back(std::move(axis));
}

void Grid::add_flag(const std::string& flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string::npos) throw std::invalid_argument("--grid '" + flag + "': expected key=value1,value2,...");
  Axis axis{flag.substr(0, eq), {}};
  std::string values = flag.substr(eq + 1);
  size_t start = 0;
  while (true) {
    const size_t comma = values.find(',', start);
    const std::string v = values.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (v.empty()) throw std::invalid_argument("--grid '" + flag + "': an empty value");
    axis.values.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  add_axis(std::move(axis), "--grid '" + flag + "'");
}

void Grid::add_file(const std::filesystem::path& path) {
  toml::table table;
  try {
    table = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << path.string() << ":" << e.source().begin.line << ": " << e.description();
    throw std::invalid_argument(where.str());
  }
  const toml::table* grid = table["grid"].as_table();
  if (!grid) throw std::invalid_argument(path.string() + ": no [grid] table");
  for (const auto& [key, node] : *grid) {
    const std::string name(key.str());
    const std::string where = path.string() + ": grid." + name;
    Axis axis{name, {}};
    if (const toml::array* values = node.as_array()) {
      for (const auto& v : *values) axis.values.push_back(toml_value_text(v, where));
    } else {
      axis.values.push_back(toml_value_text(node, where));
    }
    add_axis(std::move(axis), where);
  }
}

std::vector<Cell> Grid::cells() const {
  size_t total = 1;
  for (const auto& axis : axes_) {
    total *= axis.values.size();
    if (total > kMaxCells) {
      throw std::invalid_argument("the grid has more than " + std::to_string(kMaxCells) + " cells (" + std::to_string(axes_.size()) +
                                  " axes): narrow it, or split it into several sweeps");
    }
  }
  std::vector<Cell> out{Cell{}};
  for (const auto& axis : axes_) {
    std::vector<Cell> next;
    for (const auto& cell : out) {
      for (const auto& v : axis.values) {
        Cell c = cell;
        c.settings.emplace_back(axis.key, v);
        next.push_back(std::move(c));
      }
    }
    out = std::move(next);
  }
  return out;
}

}  // namespace frugal::sweep
