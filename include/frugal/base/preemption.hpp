#pragma once
// SIGTERM and SIGUSR1 (a spot reclaim notice, Slurm's pre-emption warning) as a request to
// stop: the handler only records the signal, so the step in progress finishes, the checkpoint
// policy writes a checkpoint and the fit returns normally. A second signal while the checkpoint
// is being written is recorded the same way and changes nothing.
//
// start_program installs the handlers before data and models load, so a signal in a program's
// first moments ends it cleanly too: stop_if_requested between start-up stages throws Preempted.
//
//   frugal::preemption::install();           // start_program and CheckpointPolicy do this
//   if (int sig = frugal::preemption::requested()) ...
//   frugal::preemption::stop_if_requested("loading the data");

namespace frugal::preemption {

/// Installs the handlers for SIGTERM and SIGUSR1 (idempotent).
void install();
/// The signal that asked to stop, or 0.
int requested();
/// Throws Preempted naming the signal and `stage` when one was requested (before training).
void stop_if_requested(const char* stage);
/// While one lives, a stop signal ends the process at once (exit 128 + signal, one line on stderr
/// naming `stage`): for waits that cannot look at the flag, such as the rendezvous with the other
/// ranks, where a recorded signal would be noticed only at the timeout.
class ExitAtOnce {
 public:
  explicit ExitAtOnce(const char* stage);
  ~ExitAtOnce();
  ExitAtOnce(const ExitAtOnce&) = delete;
  ExitAtOnce& operator=(const ExitAtOnce&) = delete;

 private:
  const char* previous_;
};
/// Asks the kernel to send this process SIGTERM when its parent (torchrun's agent, or the
/// launcher that started it) dies, however it dies; a parent already gone counts as dead now.
/// With the handlers installed, the rank then stops as on a pre-emption: a checkpoint if every
/// rank can still take part, then exit. Linux only (PR_SET_PDEATHSIG); elsewhere a no-op.
void exit_with_parent();
/// Forgets a request (tests; a fit that has handled it).
void clear();

}  // namespace frugal::preemption
