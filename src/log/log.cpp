// spdlog behind frugal::log. This file is compiled without LibTorch's include path (see
// src/CMakeLists.txt) so that spdlog finds Debian's fmt, not the one LibTorch bundles.
#include "frugal/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "frugal/errors.hpp"

namespace frugal::log {
namespace {

// The console sink, which clears the status line before a message and draws it again after,
// so that log lines scroll above a progress bar instead of running into it.
class ConsoleWithStatusLine : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    std::lock_guard lock(mutex_);
    if (!status_.empty()) std::fputs("\r\033[K", stderr);
    inner_.log(msg);
    inner_.flush();
    if (!status_.empty()) draw();
  }
  void flush() override { inner_.flush(); }
  void set_pattern(const std::string& pattern) override { inner_.set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override { inner_.set_formatter(std::move(formatter)); }
  void set_status(std::string_view line) {
    std::lock_guard lock(mutex_);
    if (line.empty() && !status_.empty()) std::fputs("\r\033[K", stderr);
    status_ = line;
    if (!status_.empty()) draw();
  }

 private:
  void draw() {
    std::fputs("\r\033[K", stderr);
    std::fwrite(status_.data(), 1, status_.size(), stderr);
    std::fflush(stderr);
  }
  std::mutex mutex_;
  spdlog::sinks::stderr_color_sink_st inner_;
  std::string status_;
};

struct State {
  std::mutex mutex;
  std::shared_ptr<ConsoleWithStatusLine> console;
  std::shared_ptr<spdlog::logger> logger;
  std::shared_ptr<spdlog::sinks::sink> file_sink;
};

State& state() {
  static State s;
  return s;
}

spdlog::logger& logger() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.logger) {
    s.console = std::make_shared<ConsoleWithStatusLine>();
    s.logger = std::make_shared<spdlog::logger>("frugal", s.console);
    s.logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    s.logger->set_level(spdlog::level::info);
    s.logger->flush_on(spdlog::level::warn);
  }
  return *s.logger;
}

}  // namespace

void set_level(Level level) {
  static constexpr spdlog::level::level_enum kLevels[] = {
      spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
      spdlog::level::warn,  spdlog::level::err,   spdlog::level::off};
  logger().set_level(kLevels[static_cast<int>(level)]);
}

Level level() {
  switch (logger().level()) {
    case spdlog::level::trace: return Level::trace;
    case spdlog::level::debug: return Level::debug;
    case spdlog::level::info: return Level::info;
    case spdlog::level::warn: return Level::warn;
    case spdlog::level::err: case spdlog::level::critical: return Level::error;
    default: return Level::off;
  }
}

void add_file_sink(const std::filesystem::path& path) {
  spdlog::logger& l = logger();
  remove_file_sink();
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path.string(), /*truncate=*/false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  std::lock_guard lock(state().mutex);
  state().file_sink = sink;
  l.sinks().push_back(sink);
}

void remove_file_sink() {
  spdlog::logger& l = logger();
  std::lock_guard lock(state().mutex);
  auto& sinks = l.sinks();
  if (state().file_sink) {
    std::erase(sinks, state().file_sink);
    state().file_sink.reset();
  }
}

void flush() { logger().flush(); }

bool console_is_terminal() { return isatty(STDERR_FILENO) == 1; }

void set_status_line(std::string_view line) {
  logger();  // makes the console sink
  if (console_is_terminal()) state().console->set_status(line);
}

void debug(std::string_view message) { logger().debug("{}", message); }
void info(std::string_view message) { logger().info("{}", message); }
void warn(std::string_view message) { logger().warn("{}", message); }
void error(std::string_view message) { logger().error("{}", message); }

}  // namespace frugal::log
