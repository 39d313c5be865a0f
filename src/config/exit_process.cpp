#include "frugal/config/exit_process.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "frugal/log.hpp"

// Sanitizers report (and set the exit code) from exit handlers, which std::_Exit skips.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FRUGAL_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(leak_sanitizer) || \
    __has_feature(memory_sanitizer)
#define FRUGAL_SANITIZED_BUILD 1
#endif
#endif

namespace frugal {

void exit_process(int code) {
  log::flush();
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
#if defined(FRUGAL_SANITIZED_BUILD)
  std::exit(code);
#else
  std::_Exit(code);
#endif
}

}  // namespace frugal
