#include "sweep.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <functional>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cell_metrics.hpp"
#include "plots.hpp"
#include "process_pool.hpp"
#include "run_record.hpp"

namespace frugal::sweep {
namespace fs = std::filesystem;
namespace {

// Whether the program's own arguments already set `key` (--key=v or --key v).
bool sets(const std::vector<std::string>& args, const std::string& key) {
  const std::string flag = "--" + key;
  return std::any_of(args.begin(), args.end(), [&](const std::string& a) { return a == flag || a.rfind(flag + "=", 0) == 0; });
}

bool in_grid(const Cell& cell, const std::string& key) {
  return std::any_of(cell.settings.begin(), cell.settings.end(), [&](const auto& s) { return s.first == key; });
}

struct Run {
  size_t cell = 0;
  int repeat = 0;
  fs::path dir;                       // <out>/cells/<NN>-<name>/r<k>
  std::vector<std::string> command;
  std::optional<nlohmann::json> result;  // result.json, when finished
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::optional<double> median_of(const std::vector<RunFigures>& runs, const std::function<std::optional<double>(const RunFigures&)>& get) {
  std::vector<double> v;
  for (const auto& r : runs) {
    if (auto x = get(r)) v.push_back(*x);
  }
  if (v.empty()) return std::nullopt;
  return median(v);
}

RunFigures median_figures(const std::vector<RunFigures>& runs) {
  RunFigures m;
  auto med = [&](auto member) { return median_of(runs, [member](const RunFigures& f) { return std::optional<double>(f.*member); }).value_or(0.0); };
  m.samples_per_s = med(&RunFigures::samples_per_s);
  m.peak_memory_mb = med(&RunFigures::peak_memory_mb);
  m.data_fraction = med(&RunFigures::data_fraction);
  m.compute_fraction = med(&RunFigures::compute_fraction);
  m.communication_fraction = med(&RunFigures::communication_fraction);
  m.loss = median_of(runs, [](const RunFigures& f) { return std::isfinite(f.loss) ? std::optional<double>(f.loss) : std::nullopt; }).value_or(std::nan(""));
  m.steps = runs.empty() ? 0 : runs.front().steps;
  m.tokens_per_s = median_of(runs, [](const RunFigures& f) { return f.tokens_per_s; });
  m.mfu = median_of(runs, [](const RunFigures& f) { return f.mfu; });
  m.cost_per_epoch = median_of(runs, [](const RunFigures& f) { return f.cost_per_epoch; });
  m.validation_loss = median_of(runs, [](const RunFigures& f) { return f.validation_loss; });
  return m;
}

// Ends a run `seconds` after its first training line past the warm-up (--seconds).
std::function<bool()> deadline_after_warmup(const fs::path& metrics, int64_t warmup, double seconds) {
  auto since = std::make_shared<std::optional<std::chrono::steady_clock::time_point>>();
  return [=]() {
    if (!*since) {
      if (has_training_line_after(metrics, warmup)) *since = std::chrono::steady_clock::now();
      return false;
    }
    return std::chrono::steady_clock::now() - **since >= std::chrono::duration<double>(seconds);
  };
}

}  // namespace

std::vector<std::string> cell_flags(const Cell& cell, const SweepOptions& o, const fs::path& run_dir) {
  std::vector<std::string> flags{"--trainer.run_dir=" + run_dir.string()};
  for (const auto& [k, v] : cell.settings) flags.push_back("--" + k + "=" + v);
  if (o.seconds <= 0) flags.push_back("--trainer.max_steps=" + std::to_string(o.warmup + o.steps));
  // Every step logged, so the timing after warm-up is exact; the smoke test first, as a real run.
  if (!sets(o.program, "trainer.log_every_n_steps") && !in_grid(cell, "trainer.log_every_n_steps")) flags.push_back("--trainer.log_every_n_steps=1");
  if (!sets(o.program, "smoke_test.mode") && !in_grid(cell, "smoke_test.mode")) flags.push_back("--smoke_test.mode=fail");
  return flags;
}

int run_sweep(const Grid& grid, const SweepOptions& o) {
  if (o.program.empty()) throw std::invalid_argument("no program to sweep: give it after --");
  if (o.steps < 1) throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(o.steps));
  if (o.warmup < 0) throw std::invalid_argument("--warmup must be >= 0, got " + std::to_string(o.warmup));
  if (o.repeat < 1) throw std::invalid_argument("--repeat must be >= 1, got " + std::to_string(o.repeat));
  if (o.seconds < 0) throw std::invalid_argument("--seconds must be >= 0");
  const Objective objective = parse_objective(o.objective);
  for (const auto& axis : grid.axes()) {
    if (sets(o.program, axis.key)) {
      throw std::invalid_argument(axis.key + " is a grid axis but the program's arguments set it too: remove --" + axis.key);
    }
  }
  for (const char* key : {"trainer.run_dir", "trainer.max_steps"}) {
    if (sets(o.program, key) && (std::string(key) == "trainer.run_dir" || o.seconds <= 0)) {
      throw std::invalid_argument(std::string("--") + key + " is set by frugal-sweep for each cell (--out, --steps): remove it from the program's arguments");
    }
  }
  std::vector<Slot> slots = make_slots(o.devices, o.parallel);
  fs::create_directories(o.out / "cells");
  const fs::path out = fs::absolute(o.out);

  const std::vector<Cell> cells = grid.cells();
  std::vector<Run> runs;
  int reused = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::string number = (i + 1 < 10 ? "0" : "") + std::to_string(i + 1) + "-";
    for (int r = 0; r < o.repeat; ++r) {
      Run run;
      run.cell = i;
      run.repeat = r;
      run.dir = out / "cells" / (number + cells[i].directory_name()) / ("r" + std::to_string(r));
      run.command = o.program;
      for (auto& f : cell_flags(cells[i], o, run.dir / "run")) run.command.push_back(std::move(f));
      if (auto done = read_run_record(run.dir / "result.json")) {
        const bool same = (*done)["command"] == nlohmann::json(run.command);
        const bool retry = o.retry_failed && done->value("status", "") != "ok";
        if (same && !retry) {
          run.result = std::move(done);
          ++reused;
        }
      }
      runs.push_back(std::move(run));
    }
  }
  if (reused) std::cout << "frugal-sweep: " << reused << " of " << runs.size() << " runs are done already (" << out.string() << ")\n";

  install_stop_handlers();
  ProcessPool pool(std::move(slots));
  size_t next_run = 0;
  double cell_seconds = 0.0;
  int ran = 0;
  const auto start = std::chrono::steady_clock::now();
  pool.run(
      [&](const Slot& slot) -> std::optional<Command> {
        while (next_run < runs.size() && runs[next_run].result) ++next_run;
        if (next_run == runs.size()) return std::nullopt;
        Run& run = runs[next_run++];
        fs::remove_all(run.dir);  // an unfinished earlier attempt must not be resumed or mixed in
        fs::create_directories(run.dir);
        Command c;
        c.id = std::to_string(&run - runs.data());
        c.argv = run.command;
        c.log = run.dir / "output.log";
        if (o.seconds > 0) c.should_end = deadline_after_warmup(run.dir / "run" / "metrics.jsonl", o.warmup, o.seconds);
        std::cout << "frugal-sweep: [" << slot.name << "] cell " << run.cell + 1 << "/" << cells.size()
                  << (o.repeat > 1 ? " repeat " + std::to_string(run.repeat + 1) : std::string()) << ": " << cells[run.cell].label()
                  << std::endl;
        return c;
      },
      [&](const Command& c, const Outcome& outcome) {
        Run& run = runs[std::stoul(c.id)];
        if (outcome.interrupted) return;  // not a result: run again next time
        ++ran;
        cell_seconds += outcome.seconds;
        nlohmann::json result{{"command", run.command}, {"exit_code", outcome.exit_code}, {"signal", outcome.signal},
                              {"seconds", outcome.seconds}, {"slot", outcome.slot}, {"cell", cells[run.cell].label()}};
        // A run ended by --seconds' SIGTERM checkpoints and exits 0 (or dies of the signal it asked for).
        const bool ended_by_deadline = o.seconds > 0 && outcome.signal == SIGTERM;
        if ((outcome.exit_code == 0 && outcome.signal == 0) || ended_by_deadline) {
          try {
            result["figures"] = to_json(read_run_figures(run.dir / "run" / "metrics.jsonl", o.warmup, o.price_per_device_hour));
            result["status"] = "ok";
          } catch (const std::exception& e) {
            result["status"] = "failed";
            result["reason"] = "no_metrics";
            result["message"] = e.what();
          }
        } else {
          const Failure f = classify_failure(outcome.exit_code, outcome.signal, c.log);
          result["status"] = "failed";
          result["reason"] = f.kind;
          result["message"] = f.message;
        }
        write_file_atomically(run.dir / "result.json", result.dump(2) + "\n");
        std::cout << "frugal-sweep: cell " << run.cell + 1 << " " << result["status"].get<std::string>()
                  << (result["status"] == "ok" ? "" : " (" + result["reason"].get<std::string>() + ")") << " in "
                  << static_cast<int64_t>(outcome.seconds * 10) / 10.0 << " s" << std::endl;
        run.result = std::move(result);
      });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // One row per cell: the medians of its repeats.
  std::vector<CellSummary> summaries;
  for (size_t i = 0; i < cells.size(); ++i) {
    CellSummary s;
    s.index = static_cast<int>(i + 1);
    s.cell = cells[i];
    std::vector<RunFigures> ok;
    bool complete = true;
    for (const auto& run : runs) {
      if (run.cell != i) continue;
      ++s.repeats;
      if (!run.result) {
        complete = false;
        continue;
      }
      s.seconds += run.result->value("seconds", 0.0);
      if (run.result->value("status", "") == "ok") {
        ok.push_back(figures_from_json((*run.result)["figures"]));
      } else if (s.failure.kind.empty()) {
        s.failure = {run.result->value("reason", "error"), run.result->value("message", "")};
      }
    }
    s.repeats_ok = static_cast<int>(ok.size());
    if (!complete && s.failure.kind.empty()) s.failure = {"not_run", "stopped before this cell finished; run the sweep again to finish it"};
    s.status = s.failure.kind.empty() && !ok.empty() ? "ok" : "failed";
    if (!ok.empty()) {
      s.figures = median_figures(ok);
      s.samples_per_s_min = s.samples_per_s_max = ok.front().samples_per_s;
      for (const auto& f : ok) {
        s.samples_per_s_min = std::min(s.samples_per_s_min, f.samples_per_s);
        s.samples_per_s_max = std::max(s.samples_per_s_max, f.samples_per_s);
      }
    }
    summaries.push_back(std::move(s));
  }
  const std::vector<CellSummary> sorted = sort_by(summaries, objective);
  std::cout << "\n" << format_table(sorted, grid.axes(), objective);
  write_csv(out / "results.csv", sorted, grid.axes());
  write_json(out / "results.json", sorted, grid.axes(), objective);
  if (o.plots) {
    for (const auto& p : write_plots(out, summaries)) std::cout << "frugal-sweep: wrote " << p.string() << "\n";
  }
  nlohmann::json totals{{"wall_seconds", wall}, {"cell_seconds", cell_seconds}, {"runs_started", ran}, {"runs_reused", reused},
                        {"slots", o.devices.empty() ? o.parallel : static_cast<int>(make_slots(o.devices, 1).size())},
                        {"overhead", cell_seconds > 0 ? wall / cell_seconds : 0.0}};
  write_file_atomically(out / "sweep.json", totals.dump(2) + "\n");
  std::cout << "frugal-sweep: results in " << (out / "results.csv").string() << "; " << ran << " runs in " << static_cast<int64_t>(wall)
            << " s\n";
  if (const int sig = stop_signal()) {
    std::cout << "frugal-sweep: stopped by signal " << sig << "; running cells were asked to stop. Run the same command again to finish.\n";
    return 128 + sig;
  }
  return 0;
}

}  // namespace frugal::sweep
