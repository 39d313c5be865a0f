#pragma once
// SIGTERM and SIGUSR1 (a spot reclaim notice, Slurm's pre-emption warning) as a request to
// stop: the handler only records the signal, so the step in progress finishes, the checkpoint
// policy writes a checkpoint and the fit returns normally. A second signal while the checkpoint
// is being written is recorded the same way and changes nothing.
//
//   frugal::preemption::install();           // CheckpointPolicy does this
//   if (int sig = frugal::preemption::requested()) ...

namespace frugal::preemption {

/// Installs the handlers for SIGTERM and SIGUSR1 (idempotent).
void install();
/// The signal that asked to stop, or 0.
int requested();
/// Forgets a request (tests; a fit that has handled it).
void clear();

}  // namespace frugal::preemption
