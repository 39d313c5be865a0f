// frugal-sweep: compares configurations of any Frugal program side by side, and runs a local
// queue of experiments so shared GPUs never sit idle.
//
//   frugal-sweep --grid precision.mode=fp32,bf16 --grid data.batch_size=16,32 --steps 30
//       --out sweeps/x -- build/examples/minimal/frugal_minimal --config examples/minimal/config.toml
//   frugal-sweep --grid-file grid.toml --repeat 3 --devices 0,1,2,3 --out sweeps/y -- ./my_trainer
//   frugal-sweep queue add runs/queue --name big -- ./my_trainer --config big.toml
//   frugal-sweep queue list runs/queue
//   frugal-sweep queue run runs/queue --devices 0,1

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "grid.hpp"
#include "job_queue.hpp"
#include "sweep.hpp"

namespace {

using frugal::sweep::Grid;
using frugal::sweep::JobQueue;
using frugal::sweep::SweepOptions;

int main_sweep(int argc, char** argv, const std::vector<std::string>& program) {
  CLI::App app{"frugal-sweep: run a Frugal program over a grid of configuration values and compare the cells.\n"
               "Usage: frugal-sweep [OPTIONS] -- PROGRAM [ARGS...]   |   frugal-sweep queue add|list|run DIR ..."};
  SweepOptions o;
  std::vector<std::string> grid_flags;
  std::string grid_file;
  app.add_option("--grid", grid_flags, "An axis: KEY=V1,V2,... (repeat for more axes), or a TOML file as --grid-file");
  app.add_option("--grid-file", grid_file, "Axes from the [grid] table of a TOML file")->check(CLI::ExistingFile);
  app.add_option("--out", o.out, "Sweep directory (results.csv, results.json, plots; a re-run resumes)")->required();
  app.add_option("--steps", o.steps, "Timed optimizer steps per cell, after warm-up")->capture_default_str();
  app.add_option("--seconds", o.seconds, "Time each cell this long after warm-up instead of --steps")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Steps not timed at each cell's start")->capture_default_str();
  app.add_option("--repeat", o.repeat, "Runs per cell: medians and spread")->capture_default_str();
  app.add_option("--objective", o.objective,
                 "Sort by samples_per_s, tokens_per_s, mfu, cost_per_epoch, peak_memory_mb, loss or validation_loss")
      ->capture_default_str();
  app.add_option("--price", o.price_per_device_hour, "Price of one device-hour: gives cost_per_epoch")->capture_default_str();
  auto* devices = app.add_option("--devices", o.devices, "CUDA devices, one cell on each at a time (CUDA_VISIBLE_DEVICES)");
  app.add_option("--parallel", o.parallel, "Cells run at once as CPU processes (without --devices)")->capture_default_str()->excludes(devices);
  app.add_flag("--retry-failed", o.retry_failed, "Run failed cells again (finished ones are skipped)");
  bool no_plots = false;
  app.add_flag("--no-plots", no_plots, "Do not draw the PNG charts");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.plots = !no_plots;
  o.program = program;
  Grid grid;
  if (!grid_file.empty()) grid.add_file(grid_file);
  for (const auto& f : grid_flags) {
    // A TOML file given to --grid (no '=', an existing file) is read as --grid-file would.
    if (f.find('=') == std::string::npos && std::filesystem::is_regular_file(f)) {
      grid.add_file(f);
    } else {
      grid.add_flag(f);
    }
  }
  return frugal::sweep::run_sweep(grid, o);
}

int main_queue(int argc, char** argv, const std::vector<std::string>& command) {
  CLI::App app{"frugal-sweep queue: a persistent queue of experiments for a shared workstation"};
  app.require_subcommand(1);
  std::string dir, name, devices;
  int parallel = 1;
  bool wait = false;
  auto* add = app.add_subcommand("add", "Queue a command: queue add DIR [--name N] -- COMMAND [ARGS...]");
  add->add_option("dir", dir, "Queue directory")->required();
  add->add_option("--name", name, "A name to list it by");
  auto* list = app.add_subcommand("list", "List the jobs and their states");
  list->add_option("dir", dir, "Queue directory")->required();
  auto* run = app.add_subcommand("run", "Run queued jobs until none is left");
  run->add_option("dir", dir, "Queue directory")->required();
  auto* dev = run->add_option("--devices", devices, "CUDA devices, one job on each at a time");
  run->add_option("--parallel", parallel, "Jobs at once as CPU processes")->capture_default_str()->excludes(dev);
  run->add_flag("--wait", wait, "Keep waiting for new jobs when the queue is empty (stop with Ctrl-C or SIGTERM)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  JobQueue queue(dir);
  if (*add) {
    std::cout << "queued job " << queue.add(command, name, std::filesystem::current_path()) << "\n";
    return 0;
  }
  if (!command.empty()) throw std::invalid_argument("only 'queue add' takes a command after --");
  if (*list) {
    std::cout << frugal::sweep::format_jobs(queue.list());
    return 0;
  }
  return queue.run(frugal::sweep::make_slots(devices, parallel), wait);
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after the first "--" is the program (or the queued command), passed on untouched.
  std::vector<char*> own;
  std::vector<std::string> program;
  bool after = false;
  for (int i = 0; i < argc; ++i) {
    if (!after && i > 0 && std::string(argv[i]) == "--") {
      after = true;
    } else if (after) {
      program.emplace_back(argv[i]);
    } else {
      own.push_back(argv[i]);
    }
  }
  try {
    if (own.size() > 1 && std::string(own[1]) == "queue") {
      std::vector<char*> rest{own[0]};
      rest.insert(rest.end(), own.begin() + 2, own.end());
      return main_queue(static_cast<int>(rest.size()), rest.data(), program);
    }
    return main_sweep(static_cast<int>(own.size()), own.data(), program);
  } catch (const std::invalid_argument& e) {
    std::cerr << "frugal-sweep: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "frugal-sweep: " << e.what() << "\n";
    return 1;
  }
}
