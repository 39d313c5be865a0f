// libFuzzer target: a TOML config file applied to a Config with every standard option bound, as
// --config does; and the same bytes, split at newlines, as a command line (load_config: the
// argument checks, then each --key=value through the config). Seeds: tests/fuzz/corpus/config.
#include <string>
#include <vector>

#include "frugal/config/standard_options.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(frugal::fuzz::bytes_of(data, size));
  const auto file = frugal::fuzz::as_file(bytes, ".toml");
  int status = frugal::fuzz::expect_frugal_errors([&] {
    frugal::Config config;
    frugal::StandardOptions options;
    frugal::bind(config, options);
    config.apply_file(file);
  });
  std::vector<std::string> args{"prog"};
  for (size_t at = 0; at <= bytes.size() && args.size() < 64;) {
    const size_t end = std::min(bytes.find('\n', at), bytes.size());
    args.push_back(bytes.substr(at, end - at));
    at = end + 1;
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  status |= frugal::fuzz::expect_frugal_errors([&] {
    frugal::Config config;
    frugal::StandardOptions options;
    frugal::bind(config, options);
    (void)frugal::load_config(static_cast<int>(argv.size()), argv.data(), config, "fuzz", {});
  });
  return status;
}
