#include "frugal/config/program.hpp"

#include <iostream>

#include "frugal/checkpoint/preemption.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/errors.hpp"

namespace frugal {

int run_program(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  } catch (const OptionError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  } catch (const Preempted& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 0;
  } catch (const SmokeTestFailed& e) {
    std::cerr << program << ": the run did not start: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
}

ProgramStart start_program(int argc, char** argv, Config& config, const StandardOptions& options,
                           const std::string& description) {
  ProgramStart start{load_config(argc, argv, config, description, process_environment()), {}};
  if (start.cli.exit_code) return start;
  log::set_level(options.log_level);
  // From here a pre-emption notice is recorded, not fatal: loading data and models can take minutes.
  if (options.checkpoint_enabled && options.checkpoint.on_signal()) preemption::install();
  start.world = detect_world(process_environment());
  resolve_device(options.trainer.device());  // before anything is written into the run directory
  if (start.world.rank == 0) {
    if (start.cli.print_config) std::cout << config.to_toml();
    if (!options.trainer.run_dir().empty()) {
      config.write_resolved(std::filesystem::path(options.trainer.run_dir()) / "config.toml");
    }
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
