// libFuzzer target: the files frugal-sweep reads back, which a killed run, a full disk or a hand
// edit can leave damaged. The first byte picks the reader, the rest is the file:
//   0: a cell's metrics.jsonl (the figures, and --seconds' check for a timed line)
//   1: a run's result.json (resuming a sweep) and the figures in it
//   2: a queue job file, and its line in `queue list`
//   3: a grid file ([grid] table), its cells and their directory names
// They may fail only with std::runtime_error or std::invalid_argument (messages naming the file);
// anything else is a finding. Seeds: tests/fuzz/corpus/sweep.
#include <stdexcept>
#include <string>

#include "frugal_sweep/cell_metrics.hpp"
#include "frugal_sweep/grid.hpp"
#include "frugal_sweep/job_queue.hpp"
#include "frugal_sweep/run_record.hpp"
#include "fuzz_support.hpp"

namespace sweep = frugal::sweep;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(frugal::fuzz::bytes_of(data + 1, size - 1));
  try {
    switch (data[0] % 4) {
      case 0: {
        const auto file = frugal::fuzz::as_file(bytes, ".jsonl");
        (void)sweep::has_training_line_after(file, 2);
        (void)sweep::to_json(sweep::read_run_figures(file, 2, 2.5));
        break;
      }
      case 1:
        if (auto record = sweep::read_run_record(frugal::fuzz::as_file(bytes, ".json"))) {
          (void)record->value("status", "");
          (void)record->value("seconds", 0.0);
          (void)record->value("reason", "error");
          (void)record->value("message", "");
          if (record->contains("figures")) (void)sweep::to_json(sweep::figures_from_json((*record)["figures"]));
        }
        break;
      case 2: {
        const auto file = frugal::fuzz::as_file(bytes, ".json");
        nlohmann::json job = sweep::read_job_record(file);
        (void)sweep::format_jobs({{"000001", "done", job, ""}});
        job["interrupted"] = job.value("interrupted", 0) + 1;  // as the runner counts a stop
        break;
      }
      default: {
        sweep::Grid grid;
        grid.add_file(frugal::fuzz::as_file(bytes, ".toml"));
        for (const auto& cell : grid.cells()) (void)(cell.label() + cell.directory_name());
      }
    }
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
