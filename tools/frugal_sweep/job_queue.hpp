#pragma once
// A persistent queue of experiments (any commands) for a shared workstation: `add` files a
// command, `run` starts queued commands on free slots (one per GPU, or N CPU processes) until
// none is left, so cards never wait for a person between experiments. Each job is one JSON
// file that moves between pending/, running/, done/ and failed/ by rename; its output goes to
// logs/<id>.log. A stopped runner (Ctrl-C, SIGTERM) sends its running jobs SIGTERM (they
// checkpoint) and puts them back in pending/, first in line; one runner at a time holds
// .runner.lock.

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process_pool.hpp"

namespace frugal::sweep {

class JobQueue {
 public:
  explicit JobQueue(std::filesystem::path dir);
  /// Files `command` (run in `cwd`) under a new id, and returns the id.
  std::string add(const std::vector<std::string>& command, const std::string& name, const std::filesystem::path& cwd);
  struct Job {
    std::string id, state;  // pending, running, done, failed
    nlohmann::json record;
    std::string damaged;  // why its file could not be read ("" when it could)
  };
  /// Every job, by id.
  std::vector<Job> list() const;
  /// Runs pending jobs until none is left (with `wait`, until stopped); returns the exit code
  /// (0, or 128 + the signal that stopped it).
  int run(std::vector<Slot> slots, bool wait);

 private:
  std::filesystem::path dir_;
};

/// A job file as the queue wrote it; std::runtime_error naming the file and the field when it is
/// damaged (a hand edit, a full disk).
nlohmann::json read_job_record(const std::filesystem::path& file);

std::string format_jobs(const std::vector<JobQueue::Job>& jobs);

}  // namespace frugal::sweep
