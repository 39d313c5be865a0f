#include "plots.hpp"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace frugal::sweep {
namespace {

constexpr int kWidth = 1000;

struct Canvas {
  Canvas(int width, int height) : surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height)), cr(cairo_create(surface)) {
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, 13);
  }
  ~Canvas() {
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
  }
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  void text(double x, double y, const std::string& s, double size = 13, double align = 0.0, bool bold = false) {
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    cairo_text_extents_t ext;
    cairo_text_extents(cr, s.c_str(), &ext);
    cairo_move_to(cr, x - align * ext.x_advance, y);
    cairo_show_text(cr, s.c_str());
  }
  double text_width(const std::string& s, double size = 13) {
    cairo_set_font_size(cr, size);
    cairo_text_extents_t ext;
    cairo_text_extents(cr, s.c_str(), &ext);
    return ext.x_advance;
  }
  void save(const std::filesystem::path& path) {
    cairo_surface_flush(surface);
    if (cairo_surface_write_to_png(surface, path.c_str()) != CAIRO_STATUS_SUCCESS) {
      throw std::runtime_error("cannot write the plot '" + path.string() + "'");
    }
  }
  cairo_surface_t* surface;
  cairo_t* cr;
};

std::string short_number(double v) {
  std::ostringstream out;
  const double a = std::fabs(v);
  if (a >= 1e6) {
    out << std::fixed << std::setprecision(2) << v / 1e6 << "M";
  } else if (a >= 1e4) {
    out << std::fixed << std::setprecision(1) << v / 1e3 << "k";
  } else if (a >= 100) {
    out << std::fixed << std::setprecision(0) << v;
  } else if (a >= 1) {
    out << std::fixed << std::setprecision(2) << v;
  } else {
    out << std::setprecision(3) << v;
  }
  return out.str();
}

// Round tick marks covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) out.push_back(t);
  return out;
}

const double kPalette[][3] = {{0.12, 0.47, 0.71}, {1.0, 0.5, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                              {0.58, 0.4, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.5, 0.5, 0.5}};

void scatter(const std::filesystem::path& path, const std::vector<CellSummary>& cells) {
  std::vector<size_t> ok;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].status == "ok") ok.push_back(i);
  }
  const int legend_lines = static_cast<int>(cells.size());
  const int height = 560 + 18 * legend_lines;
  Canvas c(kWidth, height);
  const double left = 90, right = kWidth - 40, top = 50, bottom = 480;
  double xlo = 1e300, xhi = -1e300, ylo = 0, yhi = -1e300;
  for (size_t i : ok) {
    xlo = std::min(xlo, cells[i].figures.peak_memory_mb);
    xhi = std::max(xhi, cells[i].figures.peak_memory_mb);
    yhi = std::max(yhi, cells[i].figures.samples_per_s);
  }
  if (ok.empty()) xlo = 0, xhi = 1, yhi = 1;
  const double xpad = std::max(1.0, (xhi - xlo) * 0.1);
  xlo = std::max(0.0, xlo - xpad), xhi += xpad, yhi *= 1.1;
  auto X = [&](double v) { return left + (v - xlo) / (xhi - xlo) * (right - left); };
  auto Y = [&](double v) { return bottom - (v - ylo) / (yhi - ylo) * (bottom - top); };
  cairo_set_source_rgb(c.cr, 0, 0, 0);
  c.text(kWidth / 2.0, 28, "throughput vs peak memory (Pareto front in red)", 16, 0.5, true);
  cairo_set_line_width(c.cr, 1);
  for (double t : ticks(xlo, xhi)) {
    cairo_set_source_rgb(c.cr, 0.9, 0.9, 0.9);
    cairo_move_to(c.cr, X(t), top), cairo_line_to(c.cr, X(t), bottom), cairo_stroke(c.cr);
    cairo_set_source_rgb(c.cr, 0, 0, 0);
    c.text(X(t), bottom + 18, short_number(t), 12, 0.5);
  }
  for (double t : ticks(ylo, yhi)) {
    cairo_set_source_rgb(c.cr, 0.9, 0.9, 0.9);
    cairo_move_to(c.cr, left, Y(t)), cairo_line_to(c.cr, right, Y(t)), cairo_stroke(c.cr);
    cairo_set_source_rgb(c.cr, 0, 0, 0);
    c.text(left - 8, Y(t) + 4, short_number(t), 12, 1.0);
  }
  cairo_set_source_rgb(c.cr, 0, 0, 0);
  cairo_rectangle(c.cr, left, top, right - left, bottom - top), cairo_stroke(c.cr);
  c.text((left + right) / 2, bottom + 40, "peak memory (MB)", 13, 0.5);
  cairo_save(c.cr);
  cairo_translate(c.cr, 24, (top + bottom) / 2);
  cairo_rotate(c.cr, -M_PI / 2);
  c.text(0, 0, "samples/s", 13, 0.5);
  cairo_restore(c.cr);
  const std::vector<size_t> front = pareto_front(cells);
  cairo_set_source_rgb(c.cr, 0.84, 0.15, 0.16);
  cairo_set_line_width(c.cr, 2);
  for (size_t k = 0; k < front.size(); ++k) {
    const auto& f = cells[front[k]].figures;
    if (k == 0) {
      cairo_move_to(c.cr, X(f.peak_memory_mb), Y(f.samples_per_s));
    } else {
      cairo_line_to(c.cr, X(f.peak_memory_mb), Y(f.samples_per_s));
    }
  }
  cairo_stroke(c.cr);
  for (size_t i : ok) {
    const auto& f = cells[i].figures;
    const bool on_front = std::find(front.begin(), front.end(), i) != front.end();
    const auto* color = kPalette[i % 8];
    cairo_set_source_rgb(c.cr, color[0], color[1], color[2]);
    cairo_arc(c.cr, X(f.peak_memory_mb), Y(f.samples_per_s), on_front ? 7 : 5, 0, 2 * M_PI);
    cairo_fill(c.cr);
    cairo_set_source_rgb(c.cr, 0, 0, 0);
    c.text(X(f.peak_memory_mb) + 9, Y(f.samples_per_s) - 6, std::string("#") + std::to_string(cells[i].index), 12);
  }
  double y = bottom + 70;
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto& s = cells[i];
    std::string line = std::string("#") + std::to_string(s.index) + "  " + s.cell.label();
    if (s.status == "ok") {
      line += "   " + short_number(s.figures.samples_per_s) + " samples/s, " + short_number(s.figures.peak_memory_mb) + " MB";
    } else {
      line += "   failed: " + s.failure.kind;
    }
    cairo_set_source_rgb(c.cr, 0, 0, 0);
    c.text(left, y, line, 12);
    y += 18;
  }
  c.save(path);
}

void bars(const std::filesystem::path& path, const std::string& title, const std::vector<CellSummary>& cells,
          const std::function<std::optional<double>(const CellSummary&)>& value) {
  const double row = 26;
  const int height = static_cast<int>(80 + row * static_cast<double>(cells.size()));
  Canvas c(kWidth, height);
  double label_width = 0, hi = 0;
  for (const auto& s : cells) {
    label_width = std::max(label_width, c.text_width(std::string("#") + std::to_string(s.index) + " " + s.cell.label(), 12));
    if (auto v = value(s)) hi = std::max(hi, *v);
  }
  const double left = std::min(520.0, label_width + 20), right = kWidth - 90;
  if (!(hi > 0)) hi = 1;
  cairo_set_source_rgb(c.cr, 0, 0, 0);
  c.text(kWidth / 2.0, 28, title, 16, 0.5, true);
  double y = 55;
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto& s = cells[i];
    cairo_set_source_rgb(c.cr, 0, 0, 0);
    c.text(left - 10, y + row * 0.6, std::string("#") + std::to_string(s.index) + " " + s.cell.label(), 12, 1.0);
    if (auto v = value(s)) {
      const auto* color = kPalette[i % 8];
      cairo_set_source_rgb(c.cr, color[0], color[1], color[2]);
      cairo_rectangle(c.cr, left, y + 3, std::max(1.0, *v / hi * (right - left)), row - 8);
      cairo_fill(c.cr);
      cairo_set_source_rgb(c.cr, 0, 0, 0);
      c.text(left + *v / hi * (right - left) + 6, y + row * 0.6, short_number(*v), 12);
    } else {
      cairo_set_source_rgb(c.cr, 0.6, 0.1, 0.1);
      c.text(left + 6, y + row * 0.6, s.status == "ok" ? "n/a" : "failed: " + s.failure.kind, 12);
    }
    y += row;
  }
  c.save(path);
}

}  // namespace

std::vector<size_t> pareto_front(const std::vector<CellSummary>& cells) {
  std::vector<size_t> front;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].status != "ok") continue;
    const auto& a = cells[i].figures;
    bool dominated = false;
    for (size_t j = 0; j < cells.size() && !dominated; ++j) {
      if (j == i || cells[j].status != "ok") continue;
      const auto& b = cells[j].figures;
      dominated = b.samples_per_s >= a.samples_per_s && b.peak_memory_mb <= a.peak_memory_mb &&
                  (b.samples_per_s > a.samples_per_s || b.peak_memory_mb < a.peak_memory_mb);
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(), [&](size_t a, size_t b) { return cells[a].figures.peak_memory_mb < cells[b].figures.peak_memory_mb; });
  return front;
}

std::vector<std::filesystem::path> write_plots(const std::filesystem::path& dir, const std::vector<CellSummary>& cells) {
  std::vector<std::filesystem::path> written;
  written.push_back(dir / "throughput_vs_memory.png");
  scatter(written.back(), cells);
  struct Metric {
    const char* file;
    const char* title;
    std::function<std::optional<double>(const RunFigures&)> get;
  };
  const std::vector<Metric> metrics{
      {"samples_per_s", "samples/s (higher is better)", [](const RunFigures& f) { return std::optional<double>(f.samples_per_s); }},
      {"tokens_per_s", "tokens/s (higher is better)", [](const RunFigures& f) { return f.tokens_per_s; }},
      {"peak_memory_mb", "peak memory, MB (lower is better)", [](const RunFigures& f) { return std::optional<double>(f.peak_memory_mb); }},
      {"mfu", "model FLOPs utilisation (higher is better)", [](const RunFigures& f) { return f.mfu; }},
      {"cost_per_epoch", "cost per epoch (lower is better)", [](const RunFigures& f) { return f.cost_per_epoch; }},
      {"loss", "training loss reached (lower is better)",
       [](const RunFigures& f) { return std::isfinite(f.loss) ? std::optional<double>(f.loss) : std::nullopt; }},
  };
  for (const auto& m : metrics) {
    const bool any = std::any_of(cells.begin(), cells.end(), [&](const CellSummary& s) { return s.status == "ok" && m.get(s.figures); });
    if (!any) continue;
    written.push_back(dir / (std::string("bars_") + m.file + ".png"));
    bars(written.back(), m.title, cells, [&](const CellSummary& s) { return s.status == "ok" ? m.get(s.figures) : std::nullopt; });
  }
  return written;
}

}  // namespace frugal::sweep
