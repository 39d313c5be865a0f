#include "run_record.hpp"

#include <fstream>
#include <string>

namespace frugal::sweep {
namespace {

bool of_type(const nlohmann::json& j, const char* key, bool (nlohmann::json::*is)() const noexcept) {
  const auto it = j.find(key);
  return it == j.end() || ((*it).*is)();
}

}  // namespace

std::optional<nlohmann::json> read_run_record(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  // Every field the sweep reads, with the type it reads it as.
  const auto status = j.find("status");
  if (status == j.end() || !status->is_string()) return std::nullopt;
  for (const char* key : {"reason", "message", "cell", "slot"}) {
    if (!of_type(j, key, &nlohmann::json::is_string)) return std::nullopt;
  }
  for (const char* key : {"seconds", "exit_code", "signal"}) {
    if (!of_type(j, key, &nlohmann::json::is_number)) return std::nullopt;
  }
  if (!of_type(j, "command", &nlohmann::json::is_array) || !of_type(j, "figures", &nlohmann::json::is_object)) return std::nullopt;
  if (status->get<std::string>() == "ok" && !j.contains("figures")) return std::nullopt;
  return j;
}

}  // namespace frugal::sweep
