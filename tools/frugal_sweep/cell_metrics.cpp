#include "cell_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace frugal::sweep {
namespace {

double number(const nlohmann::json& line, const char* key, double fallback = 0.0) {
  auto it = line.find(key);
  return it != line.end() && it->is_number() ? it->get<double>() : fallback;
}

// A step count from a JSON number (a double): 0 when it is not a count a run could reach.
int64_t count(double value) { return std::isfinite(value) && value > 0 && value < 1e15 ? static_cast<int64_t>(value) : 0; }

std::string string_field(const nlohmann::json& line, const char* key) {
  auto it = line.find(key);
  return it != line.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

RunFigures read_run_figures(const std::filesystem::path& metrics, int64_t warmup_steps, double price_per_device_hour) {
  std::ifstream in(metrics);
  if (!in) throw std::runtime_error("no metrics file '" + metrics.string() + "'");
  std::vector<nlohmann::json> train;
  std::optional<nlohmann::json> fit, validation;
  std::string text;
  int64_t line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.empty()) continue;
    nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_discarded() || !line.is_object()) {
      // The last line of a run that was killed may be cut short; any other is damage.
      if (in.peek() == EOF) break;
      throw std::runtime_error(metrics.string() + ":" + std::to_string(line_number) + ": not a JSON object");
    }
    const std::string event = string_field(line, "event");
    if (event == "train") train.push_back(std::move(line));
    if (event == "fit" && !fit) fit = std::move(line);
    if (event == "validation") validation = std::move(line);
  }
  RunFigures f;
  for (const auto& t : train) f.peak_memory_mb = std::max(f.peak_memory_mb, number(t, "peak_memory_mb"));
  std::vector<const nlohmann::json*> timed;
  const nlohmann::json* start = nullptr;  // the last line at or before the warm-up's end
  for (const auto& t : train) {
    if (number(t, "step") <= static_cast<double>(warmup_steps)) {
      start = &t;
    } else {
      timed.push_back(&t);
    }
  }
  if (timed.empty()) {
    throw std::runtime_error(metrics.string() + ": no training log line after the " + std::to_string(warmup_steps) +
                             " warm-up steps (run more steps, or log more often)");
  }
  const nlohmann::json& last = *timed.back();
  if (start && last.contains("samples_seen") && start->contains("samples_seen") &&
      number(last, "time") > number(*start, "time")) {
    f.samples_per_s = (number(last, "samples_seen") - number(*start, "samples_seen")) / (number(last, "time") - number(*start, "time"));
  } else {  // no line to time from: the windows' own rates, weighted as equal spans of samples
    double inverse = 0.0;
    for (const auto* t : timed) inverse += 1.0 / std::max(1e-9, number(*t, "samples_per_s"));
    f.samples_per_s = static_cast<double>(timed.size()) / inverse;
  }
  double tokens_ratio = 0.0, mfu = 0.0;
  int tokens_lines = 0, mfu_lines = 0;
  for (const auto* t : timed) {
    f.data_fraction += number(*t, "data_wait_fraction") / static_cast<double>(timed.size());
    f.compute_fraction += number(*t, "compute_fraction") / static_cast<double>(timed.size());
    f.communication_fraction += number(*t, "communication_fraction") / static_cast<double>(timed.size());
    if (t->contains("tokens_per_s") && number(*t, "samples_per_s") > 0) {
      tokens_ratio += number(*t, "tokens_per_s") / number(*t, "samples_per_s");
      ++tokens_lines;
    }
    if (t->contains("mfu") && (*t)["mfu"].is_number()) {
      mfu += number(*t, "mfu");
      ++mfu_lines;
    }
  }
  if (tokens_lines) f.tokens_per_s = f.samples_per_s * tokens_ratio / tokens_lines;
  if (mfu_lines) f.mfu = mfu / mfu_lines;
  f.loss = number(last, "loss", std::nan(""));
  f.steps = count(number(last, "step"));
  if (validation && validation->contains("loss")) f.validation_loss = number(*validation, "loss", std::nan(""));
  if (price_per_device_hour > 0 && fit && f.samples_per_s > 0) {
    const double devices = std::max(1.0, number(*fit, "world_size", 1.0));
    f.cost_per_epoch = price_per_device_hour * devices * number(*fit, "samples_per_epoch") / f.samples_per_s / 3600.0;
  }
  return f;
}

bool has_training_line_after(const std::filesystem::path& metrics, int64_t warmup_steps) {
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && string_field(j, "event") == "train" && number(j, "step") > static_cast<double>(warmup_steps)) return true;
  }
  return false;
}

Failure classify_failure(int exit_code, int signal, const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string line, last;
  std::string all;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last = line;
    all += lower(line) + "\n";
    if (all.size() > (1 << 20)) all.erase(0, all.size() - (1 << 19));
  }
  Failure f;
  f.message = last.size() > 400 ? last.substr(0, 400) + "..." : last;
  const std::string l = lower(last);
  if (signal != 0) {
    f.kind = "signal";
    f.message = "ended by signal " + std::to_string(signal) + (last.empty() ? "" : ": " + f.message);
  } else if (l.find("out of memory") != std::string::npos || l.find("outofmemory") != std::string::npos) {
    f.kind = "out_of_memory";
  } else if (l.find("smoke test") != std::string::npos) {
    f.kind = "smoke_test";
  } else if (l.find("non-finite") != std::string::npos || l.find("recovery: gave up") != std::string::npos) {
    f.kind = "non_finite";
  } else if (exit_code == 2) {
    f.kind = "bad_config";
  } else {
    f.kind = "error";
  }
  if (f.message.empty()) f.message = "exit code " + std::to_string(exit_code) + ", no output";
  return f;
}

nlohmann::json to_json(const RunFigures& f) {
  nlohmann::json j{{"samples_per_s", f.samples_per_s},       {"peak_memory_mb", f.peak_memory_mb},
                   {"data_fraction", f.data_fraction},       {"compute_fraction", f.compute_fraction},
                   {"communication_fraction", f.communication_fraction},
                   {"loss", std::isfinite(f.loss) ? nlohmann::json(f.loss) : nlohmann::json()},
                   {"steps", f.steps}};
  if (f.tokens_per_s) j["tokens_per_s"] = *f.tokens_per_s;
  if (f.mfu) j["mfu"] = *f.mfu;
  if (f.cost_per_epoch) j["cost_per_epoch"] = *f.cost_per_epoch;
  if (f.validation_loss && std::isfinite(*f.validation_loss)) j["validation_loss"] = *f.validation_loss;
  return j;
}

RunFigures figures_from_json(const nlohmann::json& j) {
  RunFigures f;
  auto get = [&](const char* k) { return j.contains(k) && j[k].is_number() ? std::optional<double>(j[k].get<double>()) : std::nullopt; };
  f.samples_per_s = get("samples_per_s").value_or(0.0);
  f.peak_memory_mb = get("peak_memory_mb").value_or(0.0);
  f.data_fraction = get("data_fraction").value_or(0.0);
  f.compute_fraction = get("compute_fraction").value_or(0.0);
  f.communication_fraction = get("communication_fraction").value_or(0.0);
  f.loss = get("loss").value_or(std::nan(""));
  f.steps = count(get("steps").value_or(0.0));
  f.tokens_per_s = get("tokens_per_s");
  f.mfu = get("mfu");
  f.cost_per_epoch = get("cost_per_epoch");
  f.validation_loss = get("validation_loss");
  return f;
}

}  // namespace frugal::sweep
