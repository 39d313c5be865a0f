#pragma once
// Per-experiment configuration, resolved once at the edge of the program into the typed option
// structs that the library uses. Each key "section.name" is bound to one field of an option
// struct; values then come in layers, each overriding the one before:
//   built-in default (the field's value) < FRUGAL_SECTION_NAME environment variable
//   < TOML config file ([section] name = value) < --section.name=value on the command line.
// Unknown keys and malformed values are ConfigErrors naming the key, the value and its source.
//
//   frugal::Config config;
//   frugal::bind(config, trainer_options);              // trainer.* keys
//   config.bind("model.hidden", hidden, "hidden width");
//   auto cli = frugal::load_config(argc, argv, config, "my trainer");  // env, file, command line
//   config.write_resolved(run_dir / "config.toml");

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frugal/base/enum_names.hpp"
#include "frugal/errors.hpp"

namespace frugal {

enum class ValueType { boolean, integer, real, string };

class Config {
 public:
  void bind(const std::string& key, bool& field, std::string help);
  void bind(const std::string& key, int64_t& field, std::string help);
  void bind(const std::string& key, double& field, std::string help);
  void bind(const std::string& key, std::string& field, std::string help, std::vector<std::string> choices = {});
  /// An enum shown and parsed by the names given.
  template <class E>
  void bind_enum(const std::string& key, E& field, std::vector<std::pair<std::string, E>> names, std::string help);
  /// An enum shown and parsed by its own text table (names_of, frugal/base/enum_names.hpp).
  template <NamedEnum E>
  void bind_enum(const std::string& key, E& field, std::string help) {
    std::vector<std::pair<std::string, E>> names;
    for (const auto& entry : names_of(E{})) names.emplace_back(std::string(entry.name), entry.value);
    bind_enum(key, field, std::move(names), std::move(help));
  }

  /// Runs `validate` (an option struct's validate()) when validate() is called; an OptionError
  /// for field F becomes a ConfigError for key "section.F" with its value and source.
  void add_check(const std::string& section, std::function<void()> validate);

  /// A short, cluster-wide name for a key's environment variable (FRUGAL_PRECISION for
  /// precision.mode). The long name FRUGAL_PRECISION_MODE still works and wins if both are set.
  void add_environment_alias(const std::string& variable, const std::string& key);

  /// Layer 2: every FRUGAL_<SECTION>_<NAME> variable in `environment` ("NAME=value" strings).
  /// A variable naming a known section but no known key is an error (a typo would otherwise
  /// be silently ignored); other FRUGAL_* variables belong to tooling and are left alone.
  void apply_environment(const std::vector<std::string>& environment);
  /// Layer 3: a TOML file.
  void apply_file(const std::filesystem::path& path);
  /// Sets `key` from text (environment, command line); `source` is named in errors.
  void apply_text(const std::string& key, const std::string& text, const std::string& source);
  /// Runs the checks added with add_check.
  void validate() const;

  /// The resolved configuration as TOML, each value commented with its source.
  std::string to_toml() const;
  void write_resolved(const std::filesystem::path& path) const;

  struct Entry {
    std::string key;
    ValueType type;
    std::string help;
    std::vector<std::string> choices;
    std::function<void(const std::string&)> assign_text;  // parses and assigns; throws ConfigError
    std::function<std::string()> current_toml;            // the value as a TOML literal
    std::string source = "default";
  };
  const std::vector<Entry>& entries() const { return entries_; }
  bool has(const std::string& key) const { return index_.count(key) != 0; }
  const std::string& source_of(const std::string& key) const;
  /// FRUGAL_TRAINER_MAX_EPOCHS for trainer.max_epochs.
  static std::string environment_name(const std::string& key);

 private:
  Entry& add(const std::string& key, ValueType type, std::string help);
  Entry& entry(const std::string& key, const std::string& source);

  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::vector<std::pair<std::string, std::function<void()>>> checks_;
  std::map<std::string, std::string> aliases_;  // environment variable -> key
};

/// What the command line asked for besides config values.
struct CommandLine {
  std::filesystem::path config_file;  // empty when none was given
  bool smoke_test_only = false;       // --smoke-test
  bool print_config = false;          // --print-config
  /// Set when the program should exit now (--help), with the text to print.
  std::optional<int> exit_code;
  std::string message;
};

/// Parses argv (--config FILE, --smoke-test, --print-config, --help, and --section.name=value
/// for every bound key), then applies the environment, the config file and the command-line
/// values in that order and validates. Throws ConfigError on any bad input. Act on the result:
/// with exit_code set (--help) the program prints message and returns, it does not train.
[[nodiscard]] CommandLine load_config(int argc, const char* const* argv, Config& config, const std::string& description,
                        const std::vector<std::string>& environment);
/// Writes `text` to `path` (parent folders made) beside and renamed, so a reader never sees half
/// a file; Error naming the file when it cannot be written.
void write_text_file_atomically(const std::filesystem::path& path, const std::string& text);

/// The process environment as "NAME=value" strings.
std::vector<std::string> process_environment();

/// The values of a TOML text as "section.key" -> the value written as TOML (comments, such as
/// Config::to_toml's sources, dropped): how ranks compare their resolved configurations.
/// ConfigError when the text does not parse.
std::map<std::string, std::string> flatten_toml(const std::string& text);

template <class E>
void Config::bind_enum(const std::string& key, E& field, std::vector<std::pair<std::string, E>> names, std::string help) {
  Entry& e = add(key, ValueType::string, std::move(help));
  for (const auto& n : names) e.choices.push_back(n.first);
  e.assign_text = [&field, names, key](const std::string& text) {
    for (const auto& [name, value] : names) {
      if (name == text) {
        field = value;
        return;
      }
    }
    std::string allowed;
    for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n.first;
    throw ConfigError("must be one of " + allowed + ", got '" + text + "'");
  };
  e.current_toml = [&field, names]() -> std::string {
    for (const auto& [name, value] : names) {
      if (value == field) return "\"" + name + "\"";
    }
    return "\"?\"";
  };
}

}  // namespace frugal
