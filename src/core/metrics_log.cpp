#include "frugal/core/metrics_log.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>

#include "frugal/errors.hpp"

namespace frugal {

MetricsLog::MetricsLog(const std::filesystem::path& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  if (!out_) throw Error("cannot open metrics file '" + path.string() + "' for appending");
}

void MetricsLog::write(const std::string& event, const std::vector<std::pair<std::string, double>>& fields) {
  if (!out_.is_open()) return;
  nlohmann::ordered_json line;
  line["event"] = event;
  line["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& [key, value] : fields) {
    // JSON has no inf/nan; a diverged loss is recorded as null rather than breaking the file.
    if (std::isfinite(value)) {
      line[key] = value;
    } else {
      line[key] = nullptr;
    }
  }
  out_ << line.dump() << '\n';
  out_.flush();
}

}  // namespace frugal
