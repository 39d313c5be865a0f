#include "job_queue.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "record_fields.hpp"
#include "report.hpp"

namespace frugal::sweep {
namespace fs = std::filesystem;
namespace {

const char* const kStates[] = {"pending", "running", "done", "failed"};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> ids_in(const fs::path& dir) {
  std::vector<std::string> ids;
  if (!fs::exists(dir)) return ids;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") ids.push_back(e.path().stem().string());
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Holds .runner.lock for the runner's lifetime.
class RunnerLock {
 public:
  explicit RunnerLock(const fs::path& dir) {
    const fs::path path = dir / ".runner.lock";
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot open '" + path.string() + "': " + std::strerror(errno));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char holder[256] = {};
      (void)!pread(fd_, holder, sizeof holder - 1, 0);
      close(fd_);
      throw std::runtime_error("the queue '" + dir.string() + "' is being run already (" + std::string(holder) + ")");
    }
    const std::string me = "pid " + std::to_string(getpid());
    (void)!ftruncate(fd_, 0);
    (void)!pwrite(fd_, me.data(), me.size(), 0);
  }
  ~RunnerLock() { close(fd_); }
  RunnerLock(const RunnerLock&) = delete;
  RunnerLock& operator=(const RunnerLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

nlohmann::json read_job_record(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read queue job file '" + file.string() + "'");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto damaged = [&](const std::string& why) {
    return std::runtime_error("queue job file '" + file.string() + "' is damaged (" + why + ")");
  };
  if (j.is_discarded() || !j.is_object()) throw damaged("not a JSON object");
  const auto command = j.find("command");
  if (command == j.end() || !command->is_array() || command->empty()) throw damaged("no command");
  for (const auto& arg : *command) {
    if (!arg.is_string()) throw damaged("command: " + arg.dump() + " is not a string");
  }
  // Every other field the queue reads, with the type it reads it as.
  if (auto why = mistyped_field(j, {"name", "cwd", "id", "slot", "log"}, {"added", "started", "ended", "seconds"})) throw damaged(*why);
  for (const char* key : {"exit_code", "signal", "interrupted"}) {  // read as int
    if (!j.contains(key)) continue;
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < -(1 << 30) || v.get<int64_t>() > (1 << 30) ||
        (v.is_number_unsigned() && v.get<uint64_t>() > (1u << 30))) {
      throw damaged(std::string(key) + " is not a small integer");
    }
  }
  return j;
}

JobQueue::JobQueue(fs::path dir) : dir_(std::move(dir)) {
  for (const char* s : kStates) fs::create_directories(dir_ / s);
  fs::create_directories(dir_ / "logs");
}

std::string JobQueue::add(const std::vector<std::string>& command, const std::string& name, const fs::path& cwd) {
  if (command.empty()) throw std::invalid_argument("queue add: no command after --");
  int next = 1;
  for (const char* s : kStates) {
    for (const auto& id : ids_in(dir_ / s)) next = std::max(next, std::atoi(id.c_str()) + 1);
  }
  nlohmann::json job{{"name", name.empty() ? fs::path(command.front()).filename().string() : name},
                     {"command", command}, {"cwd", fs::absolute(cwd).string()}, {"added", now_seconds()}};
  // The id file is created exclusively, so two concurrent adds cannot take the same id.
  for (;; ++next) {
    char id[16];
    std::snprintf(id, sizeof id, "%06d", next);
    job["id"] = id;
    const fs::path file = dir_ / "pending" / (std::string(id) + ".json");
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      throw std::runtime_error("cannot create '" + file.string() + "': " + std::strerror(errno));
    }
    close(fd);
    write_file_atomically(file, job.dump(2) + "\n");
    return id;
  }
}

std::vector<JobQueue::Job> JobQueue::list() const {
  std::vector<Job> jobs;
  for (const char* s : kStates) {
    for (const auto& id : ids_in(dir_ / s)) {
      try {
        jobs.push_back({id, s, read_job_record(dir_ / s / (id + ".json")), ""});
      } catch (const std::runtime_error& e) {
        jobs.push_back({id, s, nlohmann::json::object(), e.what()});
      }
    }
  }
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.id < b.id; });
  return jobs;
}

int JobQueue::run(std::vector<Slot> slots, bool wait) {
  RunnerLock lock(dir_);
  // Jobs a killed runner left in running/ go back to the front of the line.
  for (const auto& id : ids_in(dir_ / "running")) {
    fs::rename(dir_ / "running" / (id + ".json"), dir_ / "pending" / (id + ".json"));
    std::cout << "frugal-sweep queue: job " << id << " was left running by an earlier runner: queued again\n";
  }
  install_stop_handlers();
  ProcessPool pool(std::move(slots));
  std::map<std::string, double> started;
  int finished = 0;
  pool.run(
      [&](const Slot& slot) -> std::optional<Command> {
        for (const auto& id : ids_in(dir_ / "pending")) {
          const fs::path from = dir_ / "pending" / (id + ".json"), to = dir_ / "running" / (id + ".json");
          std::error_code ec;
          fs::rename(from, to, ec);
          if (ec) continue;  // removed meanwhile
          nlohmann::json job;
          try {
            job = read_job_record(to);
          } catch (const std::runtime_error& e) {  // one bad file must not stop the queue
            fs::rename(to, dir_ / "failed" / (id + ".json"), ec);
            std::cout << "frugal-sweep queue: " << e.what() << ": moved to failed/" << std::endl;
            continue;
          }
          Command c;
          c.id = id;
          c.argv = job["command"].get<std::vector<std::string>>();
          c.cwd = job.value("cwd", "");
          c.log = dir_ / "logs" / (id + ".log");
          started[id] = now_seconds();
          std::cout << "frugal-sweep queue: [" << slot.name << "] job " << id << " (" << job.value("name", "") << ")" << std::endl;
          return c;
        }
        return std::nullopt;
      },
      [&](const Command& c, const Outcome& outcome) {
        const fs::path running = dir_ / "running" / (c.id + ".json");
        nlohmann::json job = read_job_record(running);
        if (outcome.interrupted) {  // it checkpointed on SIGTERM: it goes on when the queue runs again
          job["interrupted"] = job.value("interrupted", 0) + 1;
          write_file_atomically(running, job.dump(2) + "\n");
          fs::rename(running, dir_ / "pending" / (c.id + ".json"));
          std::cout << "frugal-sweep queue: job " << c.id << " stopped, queued again" << std::endl;
          return;
        }
        job["started"] = started[c.id];
        job["ended"] = now_seconds();
        job["seconds"] = outcome.seconds;
        job["exit_code"] = outcome.exit_code;
        job["signal"] = outcome.signal;
        job["slot"] = outcome.slot;
        job["log"] = c.log.string();
        const bool ok = outcome.exit_code == 0 && outcome.signal == 0;
        write_file_atomically(running, job.dump(2) + "\n");
        fs::rename(running, dir_ / (ok ? "done" : "failed") / (c.id + ".json"));
        ++finished;
        std::cout << "frugal-sweep queue: job " << c.id << (ok ? " done" : " failed") << " in "
                  << static_cast<int64_t>(outcome.seconds * 10) / 10.0 << " s"
                  << (ok ? "" : " (exit " + std::to_string(outcome.exit_code) + (outcome.signal ? ", signal " + std::to_string(outcome.signal) : "") + ")")
                  << std::endl;
      },
      wait);
  const size_t left = ids_in(dir_ / "pending").size();
  std::cout << "frugal-sweep queue: " << finished << " jobs finished, " << left << " pending\n";
  if (const int sig = stop_signal()) return 128 + sig;
  return 0;
}

std::string format_jobs(const std::vector<JobQueue::Job>& jobs) {
  std::ostringstream out;
  out << std::left << std::setw(8) << "id" << std::setw(9) << "state" << std::setw(18) << "name" << std::setw(10) << "result"
      << std::setw(10) << "seconds" << "command\n";
  for (const auto& j : jobs) {
    if (!j.damaged.empty()) {
      out << std::left << std::setw(8) << j.id << std::setw(9) << j.state << j.damaged << "\n";
      continue;
    }
    std::string command;
    for (const auto& a : j.record["command"]) {
      if (!command.empty()) command += ' ';
      command += a.get<std::string>();
    }
    std::string result;
    if (j.record.contains("exit_code")) {
      result = j.record.value("signal", 0) ? std::string("signal ") + std::to_string(j.record.value("signal", 0)) : std::string("exit ") + std::to_string(j.record.value("exit_code", 0));
    }
    std::ostringstream seconds;
    if (j.record.contains("seconds")) seconds << std::fixed << std::setprecision(1) << j.record.value("seconds", 0.0);
    out << std::left << std::setw(8) << j.id << std::setw(9) << j.state << std::setw(18) << j.record.value("name", "") << std::setw(10)
        << result << std::setw(10) << seconds.str() << command << "\n";
  }
  return out.str();
}

}  // namespace frugal::sweep
