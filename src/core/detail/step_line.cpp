#include "core/detail/step_line.hpp"

#include <cmath>
#include <cstdio>

namespace frugal::detail {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string words(std::string name) {
  for (char& c : name) {
    if (c == '_') c = ' ';
  }
  return name;
}

}  // namespace

std::string readable_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  if (std::fabs(value) >= 100.0) {
    std::snprintf(text, sizeof text, "%.0f", value);
  } else {
    std::snprintf(text, sizeof text, "%.3g", value);
  }
  return text;
}

std::string readable_figure(const std::string& name, double value) {
  if (ends_with(name, "_mb")) return words(name.substr(0, name.size() - 3)) + " " + readable_number(value) + " MB";
  if (name == "tflops") return readable_number(value) + " TFLOP/s";
  if (ends_with(name, "_per_s")) return readable_number(value) + " " + words(name.substr(0, name.size() - 6)) + "/s";
  if (name == "mfu" || name == "gpu_utilization" || ends_with(name, "_fraction")) {
    return words(name) + " " + readable_number(100.0 * value) + "%";
  }
  return words(name) + " " + readable_number(value);
}

std::string StepLine::format(const Figures& f, const Metrics& extra) {
  std::string line = "step " + std::to_string(f.step) + " epoch " + std::to_string(f.epoch) + " loss " + readable_number(f.loss) +
                     " lr " + readable_number(f.lr) + " " + readable_number(f.samples_per_s) + " samples/s data wait " +
                     std::to_string(static_cast<int64_t>(100.0 * f.data_wait_fraction)) + "%";
  for (const auto& [name, value] : extra) {
    std::string text = readable_figure(name, value);
    auto [it, added] = said_.try_emplace(name, text);
    if (!added && it->second == text) continue;
    it->second = text;
    line += ", " + text;
  }
  return line;
}

}  // namespace frugal::detail
