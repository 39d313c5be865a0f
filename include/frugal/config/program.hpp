#pragma once
// What every Frugal training program's main() does around its body: exit codes that scripts can
// act on, and the --smoke-test mode.
//
//   int main(int argc, char** argv) {
//     frugal::exit_process(frugal::run_program("my_trainer", [&] { return train(argc, argv); }));
//   }

#include <functional>
#include <string>

#include "frugal/config/config.hpp"
#include "frugal/config/exit_process.hpp"
#include "frugal/config/standard_options.hpp"
#include "frugal/distributed/world.hpp"
#include "frugal/policies/smoke_test.hpp"

namespace frugal {

class Trainer;

/// Runs `body`; an exception becomes one line on stderr prefixed with `program` and an exit code:
/// 2 for bad configuration (ConfigError, OptionError), 1 for anything else (a failed smoke test
/// says the run did not start).
int run_program(const std::string& program, const std::function<int()>& body);

struct ProgramStart {
  CommandLine cli;  // when cli.exit_code is set (--help), print cli.message and return it
  World world;      // this process's rank among torchrun's or Slurm's
};

/// The start of a training program after its keys are bound: loads the config (environment,
/// file, command line), applies the log level, and on rank 0 prints the resolved config for
/// --print-config and writes it to <run_dir>/config.toml. Act on the result: with cli.exit_code
/// set (--help, --print-config) print cli.message and return it; with cli.smoke_test_only run
/// run_smoke_test_only instead of fit().
[[nodiscard]] ProgramStart start_program(int argc, char** argv, Config& config, const StandardOptions& options,
                           const std::string& description);

/// --smoke-test: runs the smoke test on `trainer` (failing mode), prints its report, returns the
/// exit code (0 passed, 1 failed).
int run_smoke_test_only(Trainer& trainer, SmokeTestOptions options);

}  // namespace frugal
