#include "run_record.hpp"

#include <fstream>
#include <string>

#include "record_fields.hpp"

namespace frugal::sweep {

std::optional<nlohmann::json> read_run_record(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  // Every field the sweep reads, with the type it reads it as.
  const auto status = j.find("status");
  if (status == j.end() || !status->is_string()) return std::nullopt;
  if (mistyped_field(j, {"reason", "message", "cell", "slot"}, {"seconds", "exit_code", "signal"})) return std::nullopt;
  const auto command = j.find("command"), figures = j.find("figures");
  if (command != j.end() && !command->is_array()) return std::nullopt;
  if (figures == j.end() ? status->get<std::string>() == "ok" : !figures->is_object()) return std::nullopt;
  return j;
}

}  // namespace frugal::sweep
