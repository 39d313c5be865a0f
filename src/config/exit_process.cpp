#include "frugal/config/exit_process.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "frugal/log.hpp"

// AddressSanitizer's leak check and reports run from exit handlers, which std::_Exit skips.
#if defined(__SANITIZE_ADDRESS__)
#define FRUGAL_EXIT_NORMALLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer) || __has_feature(memory_sanitizer)
#define FRUGAL_EXIT_NORMALLY 1
#endif
#endif

// ThreadSanitizer also ends with std::_Exit: GCC 12's runtime dies at exit ("failed to allocate
// 0x1ec2ffffff000 bytes", exit code 66) when a library's destructor first touches its dynamic TLS
// on the main thread, as libgnutls's does (loaded with libcurl), on glibc 2.36. Its exit code for
// reports is kept here instead: each report is counted by its hook.
#if defined(__SANITIZE_THREAD__)
#define FRUGAL_COUNT_TSAN_REPORTS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FRUGAL_COUNT_TSAN_REPORTS 1
#endif
#endif

#if defined(FRUGAL_COUNT_TSAN_REPORTS)
namespace {
std::atomic<int> tsan_reports{0};
}
// Called by the runtime after each report it prints (a weak hook of libtsan).
extern "C" void __tsan_on_report(const void*) { tsan_reports.fetch_add(1); }
#endif

namespace frugal {

void exit_process(int code) {
  log::flush();
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
#if defined(FRUGAL_EXIT_NORMALLY)
  std::exit(code);
#else
#if defined(FRUGAL_COUNT_TSAN_REPORTS)
  if (code == 0 && tsan_reports.load() > 0) code = 66;  // TSan's own exit code for reports
#endif
  std::_Exit(code);
#endif
}

}  // namespace frugal
