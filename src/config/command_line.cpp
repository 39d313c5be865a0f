// The command-line edge of the configuration: CLI11 parses argv, with one option per bound
// key, so --help lists every key with its default; the values then go through Config.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include "frugal/config/config.hpp"

extern char** environ;

namespace frugal {

std::vector<std::string> process_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

CommandLine load_config(int argc, const char* const* argv, Config& config, const std::string& description,
                        const std::vector<std::string>& environment) {
  CommandLine result;
  CLI::App app(description);
  std::string config_file;
  app.add_option("--config", config_file, "TOML config file ([section] key = value)")->check(CLI::ExistingFile);
  app.add_flag("--smoke-test", result.smoke_test_only, "Run only the CPU smoke test, then exit");
  app.add_flag("--print-config", result.print_config, "Print the resolved configuration");

  // Each key is captured as text in command-line order, then parsed by Config so that every
  // source reports errors the same way.
  std::vector<std::pair<std::string, std::string>> given;
  std::vector<std::string> texts(config.entries().size());
  for (size_t i = 0; i < config.entries().size(); ++i) {
    const auto& e = config.entries()[i];
    std::string help = e.help;
    if (!e.choices.empty()) {
      help += " (";
      for (size_t c = 0; c < e.choices.size(); ++c) help += (c ? "|" : "") + e.choices[c];
      help += ")";
    }
    help += " [default " + e.current_toml() + ", env " + Config::environment_name(e.key) + "]";
    app.add_option("--" + e.key, texts[i], help)->type_name(e.type == ValueType::boolean ? "BOOL" : "VALUE");
  }
  // "--key=value" is split here: CLI11 reads "--key=" (an empty value) as a missing one and takes
  // the next argument as the value, while "--key" "" is an empty string as meant.
  if (argc > 0) app.name(argv[0]);  // what parse(argc, argv) would have done, for --help
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {  // CLI11's parse(vector) takes the arguments reversed
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && arg.size() > 2 && eq != std::string::npos) {
      args.push_back(arg.substr(eq + 1));
      args.push_back(arg.substr(0, eq));
    } else {
      args.push_back(arg);
    }
  }
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    result.exit_code = 0;
    result.message = app.help();
    return result;
  } catch (const CLI::ParseError& error) {
    throw ConfigError(std::string("command line: ") + error.what() + " (run with --help to list the options)");
  }
  for (size_t i = 0; i < config.entries().size(); ++i) {
    const std::string key = config.entries()[i].key;
    if (app.get_option("--" + key)->count() > 0) given.emplace_back(key, texts[i]);
  }

  config.apply_environment(environment);
  if (!config_file.empty()) {
    result.config_file = config_file;
    config.apply_file(config_file);
  }
  for (const auto& [key, text] : given) config.apply_text(key, text, "command line --" + key);
  config.validate();
  return result;
}

}  // namespace frugal
