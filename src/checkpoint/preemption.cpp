#include "frugal/checkpoint/preemption.hpp"

#include <csignal>
#include <string>

#include "frugal/errors.hpp"

namespace frugal::preemption {
namespace {
volatile std::sig_atomic_t requested_signal = 0;
extern "C" void on_signal(int signal) { requested_signal = signal; }
}  // namespace

void install() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // not SA_RESETHAND: a second signal is caught too
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int requested() { return requested_signal; }

void stop_if_requested(const char* stage) {
  const int signal = requested_signal;
  if (signal == 0) return;
  clear();
  throw Preempted(std::string(signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "a stop signal") + " while " + stage +
                  ": stopped before training started; nothing was trained or written, the next start begins as this one would have");
}
void clear() { requested_signal = 0; }

}  // namespace frugal::preemption
