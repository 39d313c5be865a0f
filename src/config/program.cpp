#include "frugal/config/program.hpp"

#include <iostream>

#include "frugal/base/preemption.hpp"
#include "frugal/core/run_lock.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace {

// One write per message: the ranks of a job share a terminal or log, and a line written in
// pieces would interleave with theirs.
void say(const std::string& line) { std::cerr << (line + "\n") << std::flush; }

}  // namespace

int run_program(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const ConfigError& e) {
    say(program + ": " + e.what());
    return 2;
  } catch (const OptionError& e) {
    say(program + ": " + e.what());
    return 2;
  } catch (const Preempted& e) {
    say(program + ": " + e.what());
    return 0;
  } catch (const SmokeTestFailed& e) {
    say(program + ": the run did not start: " + e.what());
    return 1;
  } catch (const std::exception& e) {
    say(program + ": " + e.what());
    return 1;
  }
}

ProgramStart start_program(int argc, char** argv, Config& config, const StandardOptions& options,
                           const std::string& description) {
  ProgramStart start{load_config(argc, argv, config, description, process_environment()), {}};
  if (start.cli.exit_code) return start;
  log::set_level(options.log_level);
  // From here a pre-emption notice is recorded, not fatal: loading data and models can take minutes.
  if ((options.checkpoint_enabled || options.checkpoint.remote().enabled()) && options.checkpoint.on_signal()) preemption::install();
  start.world = detect_world(process_environment());
  // A rank orphaned by a killed agent (SIGKILL from a scheduler or the OOM killer) would train on
  // and write checkpoints beside the relaunch; it gets SIGTERM instead.
  if (start.world.launcher == "torchrun" && options.exit_with_launcher) preemption::exit_with_parent();
  resolve_device(options.trainer.device());  // before anything is written into the run directory
  if (start.world.rank == 0 && start.cli.print_config) std::cout << config.to_toml();
  // Several ranks first agree on the configuration (add_policies); nothing is written before.
  if (start.world.world_size == 1 && !options.trainer.run_dir().empty() && !start.cli.smoke_test_only) {
    const std::filesystem::path run_dir(options.trainer.run_dir());
    lock_run_directory(run_dir);
    config.write_resolved(run_dir / "config.toml");
  }
  return start;
}

int run_smoke_test_only(Trainer& trainer, SmokeTestOptions options) {
  options.mode(SmokeTestMode::fail);
  const SmokeTestReport report = run_smoke_test(trainer, options);
  std::cout << report.to_string() << "\n";
  return report.passed ? 0 : 1;
}

}  // namespace frugal
