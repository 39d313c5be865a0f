// libFuzzer target: a TOML config file applied to a Config with every standard option bound, as
// --config does. Seeds: tests/fuzz/corpus/config.
#include "frugal/config/standard_options.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = frugal::fuzz::as_file(frugal::fuzz::bytes_of(data, size), ".toml");
  return frugal::fuzz::expect_frugal_errors([&] {
    frugal::Config config;
    frugal::StandardOptions options;
    frugal::bind(config, options);
    config.apply_file(file);
  });
}
