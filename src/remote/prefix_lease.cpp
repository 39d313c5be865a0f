#include "frugal/remote/prefix_lease.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kLeaseObject = "frugal.lease";
constexpr int kMostRounds = 20;  // looks at the lease before giving up (each after a change)

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("unknown");
}

// This boot of this machine: a pid means something only within it.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string new_run_id() {
  std::random_device device;
  std::ostringstream out;
  out << std::hex << device() << device();
  return out.str();
}

bool process_alive(int64_t pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

// What a lease object says of its holder.
struct Holder {
  std::string run_id, host, boot, run_dir;
  int64_t pid = 0;
  double renewed_unix = 0, lease_seconds = 0;
  bool readable = false;

  static Holder parse(const std::string& bytes) {
    Holder h;
    try {
      const json j = json::parse(bytes);
      h.run_id = j.at("run_id").get<std::string>();
      h.host = j.value("host", "");
      h.boot = j.value("boot_id", "");
      h.run_dir = j.value("run_dir", "");
      h.pid = j.value("pid", int64_t{0});
      h.renewed_unix = j.value("renewed_unix", 0.0);
      h.lease_seconds = j.value("lease_seconds", 0.0);
      h.readable = std::isfinite(h.renewed_unix) && std::isfinite(h.lease_seconds);
    } catch (const std::exception&) {
      h.readable = false;
    }
    return h;
  }
  std::string describe() const {
    if (!readable) return "an unreadable lease object";
    return "run " + run_id + (run_dir.empty() ? "" : " (" + run_dir + ")") + " on host " + host + ", pid " + std::to_string(pid);
  }
  std::string age() const {
    return readable ? std::to_string(static_cast<int64_t>(std::max(0.0, unix_now() - renewed_unix))) + " s ago" : "at an unknown time";
  }
  // Gone for sure: a process of this boot that no longer exists, or not renewed for twice its
  // duration by our clock (a clock skew of up to one duration cannot make a live lease look so).
  bool surely_stale(const std::string& our_boot) const {
    if (!readable) return false;
    if (!boot.empty() && boot == our_boot && !process_alive(pid)) return true;
    return renewed_unix + 2 * std::max(lease_seconds, 1.0) < unix_now();
  }
};

}  // namespace

std::string PrefixLease::key_of(const S3Location& location) { return location.key(kLeaseObject); }

PrefixLease::PrefixLease(const S3Location& location, const S3ClientOptions& client, PrefixLeaseOptions options)
    : client_(location, client), options_(std::move(options)), key_(key_of(location)), run_id_(new_run_id()) {
  if (!(options_.lease_seconds > 0) || !std::isfinite(options_.lease_seconds)) {
    throw OptionError("remote_lease_seconds", "remote_lease_seconds must be > 0, got " + std::to_string(options_.lease_seconds));
  }
  holder_ = Holder{run_id_, host_name(), boot_id(), options_.run_dir, static_cast<int64_t>(::getpid()), 0, 0, true}.describe();
}

std::unique_ptr<PrefixLease> PrefixLease::acquire(const S3Location& location, const S3ClientOptions& client, PrefixLeaseOptions options) {
  std::unique_ptr<PrefixLease> lease(new PrefixLease(location, client, std::move(options)));
  lease->take();
  lease->renewer_ = std::thread([raw = lease.get()] { raw->renew_until_stopped(); });
  return lease;
}

std::string PrefixLease::body(int64_t renewals) const {
  return json{{"frugal_lease", 1},
              {"run_id", run_id_},
              {"host", host_name()},
              {"boot_id", boot_id()},
              {"pid", static_cast<int64_t>(::getpid())},
              {"run_dir", options_.run_dir},
              {"lease_seconds", options_.lease_seconds},
              {"renewals", renewals},
              {"renewed_unix", unix_now()}}
      .dump();
}

void PrefixLease::take() {
  const std::string url = client_.location().url();
  const std::string our_boot = boot_id();
  for (int round = 0; round < kMostRounds; ++round) {
    const auto current = client_.get_versioned(key_);
    std::optional<std::string> etag;
    if (!current) {
      etag = client_.put_bytes_if(key_, body(0), {true, ""});
      if (!etag) continue;  // created by another run meanwhile: look at it
    } else {
      const Holder holder = Holder::parse(current->bytes);
      if (!holder.surely_stale(our_boot)) {
        // Alive or not: a live holder renews every quarter of its lease, so a whole lease with
        // no change means it is gone. Watched by our own clock (no clock skew).
        const double watch = std::max(holder.readable ? holder.lease_seconds : options_.lease_seconds, 1.0) + 1.0;
        log::info("checkpoint.remote " + url + " is leased to " + holder.describe() + ", renewed " + holder.age() +
                  ": watching the lease for up to " + std::to_string(static_cast<int64_t>(std::ceil(watch))) + " s to tell whether that run is alive");
        const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(watch));
        bool changed = false, gone = false;
        while (Clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::duration<double>(std::min(1.0, watch / 8)));
          const auto now = client_.get_versioned(key_);
          if (!now) {
            gone = true;  // released meanwhile: take it afresh
            break;
          }
          if (now->etag != current->etag || now->bytes != current->bytes) {
            changed = true;
            break;
          }
        }
        if (gone) continue;
        if (changed) {
          const Holder live = Holder::parse(client_.get_versioned(key_).value_or(S3Versioned{current->bytes, ""}).bytes);
          throw CheckpointError("checkpoint.remote " + url + " is in use: its lease is held by " + live.describe() + ", renewed " +
                                live.age() + ". Two runs writing one prefix destroy each other's checkpoints: give this run another " +
                                "checkpoint.remote prefix, or stop that run (a lease not renewed for " +
                                std::to_string(static_cast<int64_t>(std::ceil(live.readable ? live.lease_seconds : options_.lease_seconds))) +
                                " s is taken over)");
        }
      }
      log::warn("checkpoint.remote " + url + ": taking over the stale lease of " + holder.describe() + " (renewed " + holder.age() +
                "; that run is gone)");
      etag = client_.put_bytes_if(key_, body(0), {false, current->etag});
      if (!etag) continue;  // changed meanwhile: look again
    }
    // A store that ignores If-None-Match writes anyway: a second create must be refused.
    if (const auto again = client_.put_bytes_if(key_, body(0), {true, ""})) {
      conditional_writes_ = false;
      etag = again;
      log::warn("the store of " + url + " ignores conditional writes (If-None-Match): the prefix's lease is best-effort " +
                "(two runs started at the same moment could both take it)");
    }
    etag_ = *etag;
    log::info("checkpoint.remote " + url + ": lease taken by " + holder_);
    return;
  }
  throw CheckpointError("checkpoint.remote " + url + ": its lease kept changing hands; another run is starting on the same prefix");
}

void PrefixLease::renew_until_stopped() {
  const auto every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.lease_seconds / 4));
  for (int64_t renewals = 1;; ++renewals) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stop_.wait_for(lock, every, [&] { return stopping_; })) return;
    }
    try {
      // A renewal gives up by the next one (a frozen store must not hold this thread for minutes).
      client_.set_deadline(Clock::now() + every);
      std::optional<std::string> etag;
      if (conditional_writes_) {
        etag = client_.put_bytes_if(key_, body(renewals), {false, etag_});
      } else {  // best-effort: look, then write
        const auto current = client_.get_versioned(key_);
        if (current && Holder::parse(current->bytes).run_id == run_id_) etag = client_.put_bytes_if(key_, body(renewals), {false, ""});
      }
      if (etag) {
        etag_ = *etag;
        continue;
      }
      const auto current = client_.get_versioned(key_);
      const Holder holder = current ? Holder::parse(current->bytes) : Holder{};
      if (current && holder.run_id == run_id_) {  // ours after all (an ETag the store formats differently)
        etag_ = current->etag;
        continue;
      }
      const std::string taker = current ? holder.describe() : std::string("nobody (the lease object was deleted)");
      {
        std::lock_guard<std::mutex> lock(mutex_);
        lost_to_ = taker;
      }
      log::error("the lease of checkpoint.remote " + client_.location().url() + " was taken over by " + taker +
                 ": this run writes nothing more there (its checkpoints stay local)");
      return;
    } catch (const std::exception& e) {
      log::debug(std::string("renewing the lease of ") + client_.location().url() + " failed (tried again): " + e.what());
    }
  }
}

bool PrefixLease::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_to_.empty();
}

void PrefixLease::check_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!lost_to_.empty()) {
    throw RemoteStorageError("the lease of " + client_.location().url() + " was taken over by " + lost_to_ + ": nothing more is written there");
  }
}

PrefixLease::~PrefixLease() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  client_.cancel_requests_in_flight();  // a renewal in flight stops now
  if (renewer_.joinable()) renewer_.join();
  if (!held()) return;
  // Released within a few seconds or left to go stale: an unreachable store must not hold the exit.
  client_.set_deadline(Clock::now() + std::chrono::seconds(5));
  try {
    const auto current = client_.get_versioned(key_);
    if (current && Holder::parse(current->bytes).run_id == run_id_) client_.remove(key_);
  } catch (const std::exception& e) {
    log::warn(std::string("could not release the lease of ") + client_.location().url() + ": " + e.what() +
              " (the next run takes it over once it is stale)");
  }
}

}  // namespace frugal
