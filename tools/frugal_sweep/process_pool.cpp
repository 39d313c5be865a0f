#include "process_pool.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace frugal::sweep {
namespace {

volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_signal = 0;

void on_stop_signal(int sig) {
  g_signal = sig;
  g_stop = 1;
}

struct Running {
  pid_t pid = -1;
  Command command;
  size_t slot = 0;
  std::chrono::steady_clock::time_point started, asked_to_end;
  bool term_sent = false, killed = false;
  std::chrono::steady_clock::time_point last_poll;
};

// fork + exec: the child gets its own process group, dies with us, writes to its log.
pid_t spawn(const Command& c, const Slot& slot) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : slot.env) {
    if (!env.count(k) || k == "CUDA_VISIBLE_DEVICES") env[k] = v;  // the user's thread count wins
  }
  for (const auto& [k, v] : c.env) env[k] = v;
  std::vector<std::string> env_text;
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = c.argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid > 0) return pid;
  // The child: only async-signal-safe calls until exec.
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (!c.cwd.empty() && chdir(c.cwd.c_str()) != 0) _exit(126);
  if (!c.log.empty()) {
    const int fd = open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  execvpe(argv[0], argv.data(), envp.data());
  const char* msg = "frugal-sweep: cannot execute the command\n";
  (void)!write(2, msg, std::strlen(msg));
  _exit(127);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_signal; }

void ProcessPool::stop() { g_stop = 1; }
bool ProcessPool::stopping() { return g_stop != 0; }

std::vector<Slot> make_slots(const std::string& devices, int parallel) {
  std::vector<Slot> slots;
  if (!devices.empty()) {
    size_t start = 0;
    while (start <= devices.size()) {
      const size_t comma = devices.find(',', start);
      const std::string d = devices.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos) {
        throw std::invalid_argument("--devices: '" + devices + "' is not a list of CUDA device numbers (e.g. 0,1,2,3)");
      }
      slots.push_back({"cuda:" + d, {{"CUDA_VISIBLE_DEVICES", d}}});
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return slots;
  }
  if (parallel < 1) throw std::invalid_argument("--parallel must be >= 1, got " + std::to_string(parallel));
  // Concurrent CPU processes share the cores rather than each taking all of them.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned threads = std::max(1u, cores / static_cast<unsigned>(parallel));
  for (int i = 0; i < parallel; ++i) {
    Slot s{"cpu:" + std::to_string(i), {}};
    if (parallel > 1) s.env["OMP_NUM_THREADS"] = std::to_string(threads);
    slots.push_back(std::move(s));
  }
  return slots;
}

ProcessPool::ProcessPool(std::vector<Slot> slots) : slots_(std::move(slots)) {
  if (slots_.empty()) throw std::invalid_argument("no slot to run commands on");
}

void ProcessPool::run(const std::function<std::optional<Command>(const Slot&)>& next,
                      const std::function<void(const Command&, const Outcome&)>& done, bool keep_polling) {
  using clock = std::chrono::steady_clock;
  std::vector<Running> running;
  std::vector<bool> busy(slots_.size(), false);
  bool exhausted = false;
  constexpr auto kGrace = std::chrono::seconds(120);  // after SIGTERM, before SIGKILL
  while (true) {
    if (!g_stop && !exhausted) {
      for (size_t s = 0; s < slots_.size(); ++s) {
        if (busy[s]) continue;
        std::optional<Command> c = next(slots_[s]);
        if (!c) {
          if (!keep_polling) exhausted = true;
          break;
        }
        Running r;
        r.command = std::move(*c);
        r.slot = s;
        r.started = r.last_poll = clock::now();
        r.pid = spawn(r.command, slots_[s]);
        busy[s] = true;
        running.push_back(std::move(r));
      }
    }
    if (running.empty() && (exhausted || g_stop)) return;
    const auto now = clock::now();
    for (auto& r : running) {
      bool end = false;
      if (g_stop) end = true;
      if (!end && r.command.should_end && now - r.last_poll > std::chrono::milliseconds(500)) {
        r.last_poll = now;
        end = r.command.should_end();
      }
      if (end && !r.term_sent) {
        kill(-r.pid, SIGTERM);
        r.term_sent = true;
        r.asked_to_end = now;
      }
      if (r.term_sent && !r.killed && now - r.asked_to_end > kGrace) {
        kill(-r.pid, SIGKILL);
        r.killed = true;
      }
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t i = 0; i < running.size(); ++i) {
      if (running[i].pid != pid) continue;
      Running r = std::move(running[i]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      busy[r.slot] = false;
      Outcome o;
      o.seconds = std::chrono::duration<double>(clock::now() - r.started).count();
      o.slot = slots_[r.slot].name;
      if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
      o.interrupted = g_stop != 0;
      done(r.command, o);
      break;
    }
  }
}

}  // namespace frugal::sweep
