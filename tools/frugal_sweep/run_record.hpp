#pragma once
// A run's result.json (what frugal-sweep recorded when the run ended), read back so that a
// sweep run again over the same directory skips what is finished.

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

namespace frugal::sweep {

/// The record in `file`; nullopt when there is none or it is damaged (not a JSON object, or a
/// field of the wrong type, as a hand edit or a full disk leaves it): that run is started again.
std::optional<nlohmann::json> read_run_record(const std::filesystem::path& file);

}  // namespace frugal::sweep
