#pragma once
// One writer per object-storage prefix, as a local run directory has its flock: a lease object
// (<prefix>/frugal.lease, JSON naming its holder: host, boot, pid, run id, run directory) created
// with a conditional write (If-None-Match: *), renewed by a background thread every quarter of
// its duration, deleted when the run ends. A second run on the prefix is refused naming the
// holder, before it touches anything there; a lease that is not renewed for its whole duration
// (its holder is gone) is taken over with a warning (a conditional write, If-Match: the ETag it
// had), at once when its holder was a process of this machine's boot that no longer exists.
// A store that ignores conditional writes is detected at acquisition; the lease is then
// best-effort (checked before it is written, with a window for two runs started together), and
// the log says so.
//
//   auto lease = frugal::PrefixLease::acquire(location, client_options, {60.0, run_dir});
//   ...                               // every write of the prefix: lease->check_held()
//   lease.reset();                    // released

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "frugal/remote/s3_client.hpp"

namespace frugal {

struct PrefixLeaseOptions {
  /// A lease not renewed for this long is stale and may be taken over.
  double lease_seconds = 60;
  /// Named in the lease (for whoever is refused): this run's directory.
  std::string run_dir;
};

class PrefixLease {
 public:
  /// Takes the lease of `location`'s prefix. A live holder's lease is told from a stale one by
  /// watching it for at most one lease duration. CheckpointError naming the holder when another
  /// live run holds it; RemoteStorageError when the store cannot be asked.
  static std::unique_ptr<PrefixLease> acquire(const S3Location& location, const S3ClientOptions& client, PrefixLeaseOptions options);
  /// Stops renewing and deletes the lease object, if it is still this run's.
  ~PrefixLease();
  PrefixLease(const PrefixLease&) = delete;
  PrefixLease& operator=(const PrefixLease&) = delete;

  /// Throws RemoteStorageError when another run has taken the lease over (this run was thought
  /// gone): nothing more may be written to the prefix.
  void check_held() const;
  bool held() const;
  /// Whether the store honours conditional writes (else the lease is best-effort).
  bool conditional_writes() const { return conditional_writes_; }
  /// This run's id, as the lease names it.
  const std::string& run_id() const { return run_id_; }
  /// The lease object's key.
  static std::string key_of(const S3Location& location);

 private:
  PrefixLease(const S3Location& location, const S3ClientOptions& client, PrefixLeaseOptions options);
  std::string body(int64_t renewals) const;
  void take();
  void renew_until_stopped();

  S3Client client_;  // its own: the uploader's deadlines and cancellations do not stop renewals
  PrefixLeaseOptions options_;
  std::string key_, run_id_, holder_;
  std::string etag_;
  bool conditional_writes_ = true;
  mutable std::mutex mutex_;
  std::string lost_to_;  // who took the lease over, once it is lost
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread renewer_;
};

}  // namespace frugal
