#include "frugal/core/run_lock.hpp"

#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace fs = std::filesystem;
namespace {

std::mutex mutex;
std::map<fs::path, int> held;  // canonical run directory -> the open lock file (-1: unlockable)

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char text[64];
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// "process 123 on host h (since ...)" from what the holder wrote into the file.
std::string holder_of(const fs::path& file) {
  std::ifstream in(file);
  std::string line, pid = "?", host = "?", since = "?";
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, value;
    words >> key >> value;
    if (key == "pid") pid = value;
    if (key == "host") host = value;
    if (key == "started") since = value;
  }
  return c10::str("process ", pid, " on host ", host, " (running since ", since, ")");
}

}  // namespace

void lock_run_directory(const fs::path& run_dir) {
  fs::create_directories(run_dir);
  const fs::path dir = fs::weakly_canonical(run_dir);
  std::lock_guard guard(mutex);
  if (held.count(dir)) return;
  const fs::path file = dir / ".frugal.lock";
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw ConfigError(c10::str("trainer.run_dir '", run_dir.string(), "': cannot open ", file.string(), ": ", std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      ::close(fd);
      throw ConfigError(c10::str("trainer.run_dir '", run_dir.string(), "' is in use by ", holder_of(file),
                                 ": wait for that run to end or stop it (it checkpoints on SIGTERM), or choose another "
                                 "trainer.run_dir; the lock is ", file.string()));
    }
    log::warn(c10::str("cannot lock ", file.string(), " (", std::strerror(error),
                       ": this file system offers no flock); a second run in this directory would not be stopped"));
    ::close(fd);
    held[dir] = -1;
    return;
  }
  const std::string text = c10::str("pid ", ::getpid(), "\nhost ", host_name(), "\nstarted ", now_text(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    log::warn(c10::str("cannot write the holder into ", file.string(), ": ", std::strerror(errno)));
  }
  held[dir] = fd;  // kept open (and locked) until the process ends
}

}  // namespace frugal
