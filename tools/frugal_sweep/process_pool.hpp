#pragma once
// Runs commands as child processes on a fixed set of slots (one per CUDA device, or N CPU
// slots), starting the next command on the first slot that frees up. Each child gets its own
// process group (a Ctrl-C at the terminal reaches only this tool), SIGTERM when this tool dies,
// and its output in a log file. stop() (from a signal handler) sends every running child
// SIGTERM, so it can checkpoint, and the pool waits for them before run() returns.

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace frugal::sweep {

struct Command {
  std::string id;                               // the caller's name for it
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;       // set on top of this process's environment
  std::filesystem::path cwd;                    // "" = this process's
  std::filesystem::path log;                    // stdout and stderr
  /// Polled about twice a second while it runs: true asks it to end (SIGTERM), as a deadline does.
  std::function<bool()> should_end;
};

struct Slot {
  std::string name;                             // "cuda:1", "cpu:0"
  std::map<std::string, std::string> env;       // CUDA_VISIBLE_DEVICES=1, OMP_NUM_THREADS=...
};

struct Outcome {
  int exit_code = 0;        // when it exited
  int signal = 0;           // when a signal ended it
  bool interrupted = false; // stop() ended it: not a result
  double seconds = 0.0;     // from start to exit
  std::string slot;
};

/// CUDA slots for "0,1,3", or `parallel` CPU slots that share this machine's cores.
std::vector<Slot> make_slots(const std::string& devices, int parallel);

class ProcessPool {
 public:
  explicit ProcessPool(std::vector<Slot> slots);
  /// Runs until next() has nothing left and every child ended, or until stop(). next() is asked
  /// for a command whenever a slot is free (nullopt: nothing now); with `keep_polling` an empty
  /// answer does not end the run (a queue others add to), only stop() does.
  void run(const std::function<std::optional<Command>(const Slot&)>& next,
           const std::function<void(const Command&, const Outcome&)>& done, bool keep_polling = false);
  /// Safe in a signal handler: ends run() after SIGTERM to every running child.
  static void stop();
  static bool stopping();

 private:
  std::vector<Slot> slots_;
};

/// SIGINT and SIGTERM call ProcessPool::stop(); returns the signal that did, 0 if none yet.
void install_stop_handlers();
int stop_signal();

}  // namespace frugal::sweep
