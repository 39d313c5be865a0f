#pragma once
// Frugal's logging front end. spdlog does the work behind it, in a translation unit of its
// own: LibTorch ships a newer fmt than Debian's spdlog is built for, so spdlog's headers must
// never meet LibTorch's. Callers pass finished strings (c10::str is handy for that).
//
//   frugal::log::info(c10::str("step ", step, " loss ", loss));
//   frugal::log::add_file_sink(run_dir / "train.log");

#include <array>
#include <filesystem>
#include <string>
#include <string_view>

#include "frugal/base/enum_names.hpp"

namespace frugal::log {

enum class Level { trace, debug, info, warn, error, off };
constexpr std::array<EnumName<Level>, 6> names_of(Level) {
  return {{{Level::trace, "trace"}, {Level::debug, "debug"}, {Level::info, "info"},
           {Level::warn, "warn"}, {Level::error, "error"}, {Level::off, "off"}}};
}
void set_level(Level level);
Level level();
/// Also writes every message to `path` (appending); replaces an earlier file sink.
void add_file_sink(const std::filesystem::path& path);
void remove_file_sink();
/// Writes out what the sinks hold (the file sink flushes by itself only from warnings up).
void flush();

/// A line kept at the bottom of the terminal (a progress bar): redrawn after each message,
/// replaced by the next call, removed by an empty one. Drawn only when stderr is a terminal.
void set_status_line(std::string_view line);
/// Whether stderr is a terminal (a status line is shown).
bool console_is_terminal();

void debug(std::string_view message);
void info(std::string_view message);
void warn(std::string_view message);
void error(std::string_view message);

}  // namespace frugal::log
