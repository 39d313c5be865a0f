#include "frugal/core/metrics_log.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>

#include "frugal/errors.hpp"
#include "frugal/io/tensorboard.hpp"

namespace frugal {

MetricsLog::MetricsLog(const std::filesystem::path& path, const std::filesystem::path& tensorboard_dir) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  if (!out_) throw Error("cannot open metrics file '" + path.string() + "' for appending");
}

MetricsLog::~MetricsLog() = default;
MetricsLog::MetricsLog(MetricsLog&&) noexcept = default;
MetricsLog& MetricsLog::operator=(MetricsLog&&) noexcept = default;

void MetricsLog::write(const std::string& event, const std::vector<std::pair<std::string, double>>& fields) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (tensorboard_) {
    int64_t step = 0;
    for (const auto& [key, value] : fields) {
      if (key == "step") step = static_cast<int64_t>(value);
    }
    for (const auto& [key, value] : fields) {
      if (key != "step") tensorboard_->add_scalar(event + "/" + key, value, step, now);
    }
    tensorboard_->flush();
  }
  if (!out_.is_open()) return;
  nlohmann::ordered_json line;
  line["event"] = event;
  line["time"] = now;
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
