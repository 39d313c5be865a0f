#include "frugal/checkpoint/preemption.hpp"

#include <csignal>

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
void clear() { requested_signal = 0; }

}  // namespace frugal::preemption
