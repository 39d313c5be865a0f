// The command-line edge of the configuration: CLI11 parses argv, with one option per bound
// key, so --help lists every key with its default; the values then go through Config.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <map>

#include "frugal/config/config.hpp"

extern char** environ;

namespace frugal {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean --x?)" for the closest option, or for the key whose last part is `name`.
std::string suggestion(const std::string& name, const std::vector<std::string>& options) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;
  for (const auto& option : options) {
    const size_t dot = option.rfind('.');
    if (dot != std::string::npos && "--" + option.substr(dot + 1) == name) return " (did you mean " + option + "?)";
    const size_t d = edit_distance(name, option);
    if (d < best_distance) best_distance = d, best = option;
  }
  return best.empty() ? std::string() : " (did you mean " + best + "?)";
}

// What CLI11 would report in its own words ("At Most 1 required but received 2", "The following
// argument was not expected: 1"), checked first and said in terms of the flags as written.
void check_arguments(int argc, const char* const* argv, const std::vector<std::string>& valued,
                     const std::vector<std::string>& switches) {
  auto is = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  std::map<std::string, std::vector<std::string>> values;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return;  // help wins over anything else on the line
    if (arg.rfind("--", 0) != 0) {
      throw ConfigError("command line: unexpected argument '" + arg + "': options are --key=value or --key value" +
                        (i > 1 && is(switches, argv[i - 1]) ? " (" + std::string(argv[i - 1]) + " takes no value)" : std::string()));
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (is(switches, name)) continue;
    if (!is(valued, name)) throw ConfigError("command line: unknown option " + name + suggestion(name, valued));
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) {
      throw ConfigError("command line: " + name + " needs a value (" + name + "=VALUE or " + name + " VALUE)" +
                        (i + 1 < argc ? std::string(", but is followed by ") + argv[i + 1] : std::string(", but ends the line")));
    } else {
      value = argv[++i];
    }
    values[name].push_back(value);
  }
  for (const auto& [name, given] : values) {
    if (given.size() < 2) continue;
    std::string list;
    for (const auto& v : given) list += (list.empty() ? "'" : ", '") + v + "'";
    throw ConfigError("command line: " + name + " is given " + std::to_string(given.size()) + " times (" + list + "): give it once");
  }
}

}  // namespace

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
  std::vector<std::string> valued{"--config"};
  for (const auto& e : config.entries()) valued.push_back("--" + e.key);
  check_arguments(argc, argv, valued, {"--smoke-test", "--print-config"});
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
