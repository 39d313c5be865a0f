#include "frugal/base/preemption.hpp"

#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <atomic>
#include <csignal>
#include <cstring>
#include <string>

#include "frugal/errors.hpp"

namespace frugal::preemption {
namespace {
// Atomics, not volatile sig_atomic_t: the kernel runs the handler on any thread that does not
// block the signal (the checkpoint uploader, a data worker) while the training thread reads the
// flag, which volatile does not order (TSan reported it); lock-free atomics are async-signal-safe.
std::atomic<int> requested_signal{0};
std::atomic<const char*> exit_stage{nullptr};  // set: a signal ends the process
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<const char*>::is_always_lock_free);

extern "C" void on_signal(int signal) {
  requested_signal.store(signal);
  if (const char* stage = exit_stage.load()) {  // only async-signal-safe calls from here
    const char head[] = "frugal: stop signal while ";
    const char tail[] = ": exiting (nothing to save yet)\n";
    ssize_t ignored = ::write(STDERR_FILENO, head, sizeof head - 1);
    ignored = ::write(STDERR_FILENO, stage, std::strlen(stage));
    ignored = ::write(STDERR_FILENO, tail, sizeof tail - 1);
    (void)ignored;
    ::_exit(128 + signal);
  }
}
}  // namespace

void install() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // not SA_RESETHAND: a second signal is caught too
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int requested() { return requested_signal.load(); }

void exit_with_parent() {
#ifdef __linux__
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() == 1) ::raise(SIGTERM);  // orphaned before the request took effect
#endif
}

ExitAtOnce::ExitAtOnce(const char* stage) : previous_(exit_stage.load()) {
  exit_stage.store(stage);
  if (const int signal = requested_signal.load(); signal != 0) on_signal(signal);  // one came before: act on it now
}

ExitAtOnce::~ExitAtOnce() { exit_stage.store(previous_); }

void stop_if_requested(const char* stage) {
  const int signal = requested_signal.load();
  if (signal == 0) return;
  clear();
  throw Preempted(std::string(signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "a stop signal") + " while " + stage +
                  ": stopped before training started; nothing was trained or written, the next start begins as this one would have");
}
void clear() { requested_signal.store(0); }

}  // namespace frugal::preemption
