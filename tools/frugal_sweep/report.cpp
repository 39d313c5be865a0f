#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace frugal::sweep {
namespace {

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "nan";
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << v;
  return out.str();
}

std::string optional_text(const std::optional<double>& v, int digits) { return v ? fixed(*v, digits) : ""; }

// Significant digits, for figures whose scale varies (a cost of 0.00002 or of 2000).
std::string significant(const std::optional<double>& v, int digits) {
  if (!v) return "";
  std::ostringstream out;
  out << std::setprecision(digits) << *v;
  return out.str();
}

// CSV quoting: a field with a comma, quote or newline is quoted, quotes doubled.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string setting(const CellSummary& s, const std::string& key) {
  for (const auto& [k, v] : s.cell.settings) {
    if (k == key) return v;
  }
  return "";
}

}  // namespace

Objective parse_objective(const std::string& name) {
  if (name == "samples_per_s" || name == "tokens_per_s" || name == "mfu") return {name, true};
  if (name == "cost_per_epoch" || name == "peak_memory_mb" || name == "loss" || name == "validation_loss") return {name, false};
  throw std::invalid_argument("--objective: '" + name +
                              "' is not one of samples_per_s, tokens_per_s, mfu, cost_per_epoch, peak_memory_mb, loss, validation_loss");
}

std::optional<double> objective_value(const CellSummary& s, const Objective& o) {
  if (s.status != "ok") return std::nullopt;
  const RunFigures& f = s.figures;
  if (o.name == "samples_per_s") return f.samples_per_s;
  if (o.name == "tokens_per_s") return f.tokens_per_s;
  if (o.name == "mfu") return f.mfu;
  if (o.name == "cost_per_epoch") return f.cost_per_epoch;
  if (o.name == "peak_memory_mb") return f.peak_memory_mb;
  if (o.name == "loss") return std::isfinite(f.loss) ? std::optional<double>(f.loss) : std::nullopt;
  if (o.name == "validation_loss") return f.validation_loss;
  return std::nullopt;
}

std::vector<CellSummary> sort_by(std::vector<CellSummary> cells, const Objective& o) {
  std::stable_sort(cells.begin(), cells.end(), [&](const CellSummary& a, const CellSummary& b) {
    const auto va = objective_value(a, o), vb = objective_value(b, o);
    if (va.has_value() != vb.has_value()) return va.has_value();
    if (!va) return a.index < b.index;
    return o.higher_is_better ? *va > *vb : *va < *vb;
  });
  return cells;
}

std::string format_table(const std::vector<CellSummary>& cells, const std::vector<Axis>& axes, const Objective& objective) {
  std::vector<std::string> header{"#"};
  for (const auto& a : axes) header.push_back(a.key);
  for (const char* h : {"status", "samples/s", "tokens/s", "peak MB", "data", "compute", "comm", "MFU", "cost/epoch", "loss"}) header.push_back(h);
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : cells) {
    std::vector<std::string> r{std::to_string(s.index)};
    for (const auto& a : axes) r.push_back(setting(s, a.key));
    if (s.status != "ok") {
      r.push_back("failed: " + s.failure.kind);
      rows.push_back(std::move(r));
      continue;
    }
    const RunFigures& f = s.figures;
    std::string sps = fixed(f.samples_per_s, 1);
    if (s.repeats_ok > 1) sps += " [" + fixed(s.samples_per_s_min, 0) + "-" + fixed(s.samples_per_s_max, 0) + "]";
    r.insert(r.end(), {"ok", sps, optional_text(f.tokens_per_s, 0), fixed(f.peak_memory_mb, 0), fixed(100 * f.data_fraction, 0) + "%",
                       fixed(100 * f.compute_fraction, 0) + "%", fixed(100 * f.communication_fraction, 0) + "%",
                       f.mfu ? fixed(100 * *f.mfu, 1) + "%" : "", significant(f.cost_per_epoch, 4), fixed(f.loss, 4)});
    rows.push_back(std::move(r));
  }
  std::vector<size_t> width(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) out << std::left << std::setw(static_cast<int>(width[i]) + 2) << r[i];
    out << "\n";
  };
  out << "sorted by " << objective.name << (objective.higher_is_better ? " (higher is better)" : " (lower is better)") << "\n";
  line(header);
  for (const auto& r : rows) line(r);
  for (const auto& s : cells) {
    if (s.status != "ok") out << "#" << s.index << " failed (" << s.failure.kind << "): " << s.failure.message << "\n";
  }
  return out.str();
}

void write_csv(const std::filesystem::path& path, const std::vector<CellSummary>& cells, const std::vector<Axis>& axes) {
  std::ostringstream out;
  out << "cell";
  for (const auto& a : axes) out << "," << csv_field(a.key);
  out << ",status,reason,samples_per_s,samples_per_s_min,samples_per_s_max,tokens_per_s,peak_memory_mb,data_fraction,"
         "compute_fraction,communication_fraction,mfu,cost_per_epoch,loss,validation_loss,repeats,seconds,message\n";
  for (const auto& s : cells) {
    const RunFigures& f = s.figures;
    const bool ok = s.status == "ok";
    out << s.index;
    for (const auto& a : axes) out << "," << csv_field(setting(s, a.key));
    out << "," << s.status << "," << (ok ? "" : s.failure.kind);
    if (ok) {
      out << "," << fixed(f.samples_per_s, 3) << "," << fixed(s.samples_per_s_min, 3) << "," << fixed(s.samples_per_s_max, 3) << ","
          << optional_text(f.tokens_per_s, 3) << "," << fixed(f.peak_memory_mb, 1) << "," << fixed(f.data_fraction, 4) << ","
          << fixed(f.compute_fraction, 4) << "," << fixed(f.communication_fraction, 4) << "," << optional_text(f.mfu, 4) << ","
          << significant(f.cost_per_epoch, 8) << "," << (std::isfinite(f.loss) ? fixed(f.loss, 6) : "") << ","
          << optional_text(f.validation_loss, 6);
    } else {
      out << std::string(12, ',');  // the 12 figures
    }
    out << "," << s.repeats_ok << "/" << s.repeats << "," << fixed(s.seconds, 2) << "," << csv_field(ok ? "" : s.failure.message) << "\n";
  }
  write_file_atomically(path, out.str());
}

void write_json(const std::filesystem::path& path, const std::vector<CellSummary>& cells, const std::vector<Axis>& axes,
                const Objective& objective) {
  nlohmann::json j;
  j["objective"] = objective.name;
  j["axes"] = nlohmann::json::array();
  for (const auto& a : axes) j["axes"].push_back({{"key", a.key}, {"values", a.values}});
  j["cells"] = nlohmann::json::array();
  for (const auto& s : cells) {
    nlohmann::json c{{"cell", s.index}, {"status", s.status}, {"repeats", s.repeats}, {"repeats_ok", s.repeats_ok}, {"seconds", s.seconds}};
    nlohmann::json settings = nlohmann::json::object();
    for (const auto& [k, v] : s.cell.settings) settings[k] = v;
    c["settings"] = settings;
    if (s.status == "ok") {
      c["figures"] = to_json(s.figures);
      c["samples_per_s_min"] = s.samples_per_s_min;
      c["samples_per_s_max"] = s.samples_per_s_max;
    } else {
      c["reason"] = s.failure.kind;
      c["message"] = s.failure.message;
    }
    j["cells"].push_back(std::move(c));
  }
  write_file_atomically(path, j.dump(2) + "\n");
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error("cannot write '" + tmp.string() + "'");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace frugal::sweep
