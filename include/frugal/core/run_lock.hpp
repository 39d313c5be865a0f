#pragma once
// One run per run directory: an exclusive advisory lock (flock) on <run_dir>/.frugal.lock, held
// by the process for the rest of its life, taken before anything is written there. A second run
// on the directory is refused at once, naming the holder's process id, host and start time. The
// kernel drops the lock when the holder dies however it dies, so a lock file left by a killed run
// never blocks (the file stays; it is the lock on it that counts).
//
// File systems: local ones, and NFSv4 (the client maps flock to a lease-backed byte-range lock;
// a holder whose host crashes is released when its lease expires, 90 s by default). NFSv3 needs
// lockd (mount without `nolock`); Lustre needs the `flock` mount option (`localflock` locks per
// client node only). Where flock is refused (ENOLCK, EOPNOTSUPP...) Frugal warns once and runs
// unlocked. See docs/distributed.md.
//
//   frugal::lock_run_directory("runs/exp1");   // start_program and Trainer::fit do this (rank 0)

#include <filesystem>

namespace frugal {

/// Takes the lock for this process (again: no-op). ConfigError naming trainer.run_dir and the
/// holder when another process has it.
void lock_run_directory(const std::filesystem::path& run_dir);

}  // namespace frugal
