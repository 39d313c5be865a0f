#include "frugal/data/sample.hpp"

#include "frugal/errors.hpp"

namespace frugal {

const std::string& Sample::field(const std::string& extension) const {
  auto it = fields.find(extension);
  if (it == fields.end()) {
    std::string have;
    for (const auto& [ext, bytes] : fields) have += (have.empty() ? "" : ", ") + ext;
    throw DataError("sample '" + key + "'", -1, "has no field '" + extension + "' (it has: " + have + ")");
  }
  return it->second;
}

std::pair<std::string, std::string> split_member_name(std::string_view name) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string_view::npos) return {std::string(name), ""};
  return {std::string(name.substr(0, dot)), std::string(name.substr(dot + 1))};
}

bool is_unsafe_member_name(std::string_view name) {
  if (name.empty() || name.front() == '/') return true;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    if (name.substr(start, end - start) == "..") return true;
    start = end + 1;
  }
  return false;
}

}  // namespace frugal
