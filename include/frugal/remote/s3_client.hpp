#pragma once
// An S3 client for checkpoints, over libcurl: requests signed with AWS Signature V4 by libcurl
// (CURLOPT_AWS_SIGV4), retried with exponential backoff and full jitter on throttling, 5xx,
// timeouts and dropped connections; every upload carries Content-MD5, which the store checks;
// files above the part size go up as multipart uploads with parallel parts, aborted when they
// fail. Works with any S3-compatible store (AWS S3, GCS's XML API, R2, MinIO, Ceph RGW,
// SeaweedFS). Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN) and never appear in a log line or an error.
//
//   frugal::S3Client s3(frugal::S3Location::parse("s3://bucket/runs/x"), frugal::S3ClientOptions::from_environment());
//   s3.put_file(s3.location().key("ckpt-000000100/state.pt"), "runs/x/checkpoints/ckpt-000000100/state.pt");

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/errors.hpp"
#include "frugal/remote/remote_options.hpp"

namespace frugal {

/// A request to the store failed for good (after its retries), or the store's answer is not
/// what it should be. The message names the request, endpoint and bucket, the HTTP status and
/// the store's error code, never a credential.
class RemoteStorageError : public Error {
 public:
  explicit RemoteStorageError(const std::string& message, long http_status = 0, std::string code = "")
      : Error(message), http_status_(http_status), code_(std::move(code)) {}
  long http_status() const noexcept { return http_status_; }
  const std::string& code() const noexcept { return code_; }

 private:
  long http_status_;
  std::string code_;
};

/// A request stopped by S3Client::cancel_requests_in_flight (the work it belonged to was dropped).
class RemoteCancelled : public RemoteStorageError {
 public:
  using RemoteStorageError::RemoteStorageError;
};

/// s3://bucket/prefix: the bucket, and the key prefix (no leading or trailing '/', may be "").
struct S3Location {
  std::string bucket;
  std::string prefix;
  /// Parses an s3:// URL; OptionError(`option`) naming what is wrong with it.
  static S3Location parse(const std::string& url, const std::string& option = "remote");
  std::string url() const;
  /// prefix + "/" + name (name alone when there is no prefix).
  std::string key(const std::string& name) const;
};

struct S3ClientOptions {
  /// Scheme and host (and port) of the store; "" = AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
  /// AWS S3's regional endpoint.
  std::string endpoint;
  /// "" = AWS_REGION, AWS_DEFAULT_REGION, else us-east-1 (what the signature names).
  std::string region;
  /// automatic: path-style with a custom endpoint, virtual-hosted on AWS (resolved() decides).
  S3Addressing addressing = S3Addressing::automatic;
  int max_attempts = 8;                  // per request, with backoff between them
  double connect_timeout_seconds = 10;
  double stall_timeout_seconds = 60;     // a transfer that moves no byte this long is retried
  uint64_t part_bytes = uint64_t{64} << 20;  // files above this go up in parts of this size
  int parallel_parts = 4;

  /// Fills endpoint and region from the AWS environment variables where they are empty and
  /// checks every field (OptionError naming it).
  S3ClientOptions resolved() const;
};

struct S3Object {
  std::string key;
  uint64_t size = 0;
};

/// An S3 conditional write: create only (If-None-Match: *), or replace only the version whose
/// ETag is `if_match`.
struct S3Condition {
  bool only_if_absent = false;
  std::string if_match;
};

/// An object's bytes with its ETag (the version a conditional write names).
struct S3Versioned {
  std::string bytes;
  std::string etag;
};

class S3Client {
 public:
  /// Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN);
  /// OptionError naming the variable when one is missing.
  S3Client(S3Location location, S3ClientOptions options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Location& location() const { return location_; }
  /// Lists one key of the bucket: a missing bucket, refused credentials or an unreachable
  /// endpoint throw here, before anything depends on the store.
  void check_access();

  void put_bytes(const std::string& key, const std::string& bytes);
  /// PUTs `bytes` under `condition`: the new ETag, or nullopt when the store refused the condition
  /// (412 Precondition Failed, 409 ConditionalRequestConflict). A store that ignores conditional
  /// headers writes anyway (PrefixLease checks for that).
  std::optional<std::string> put_bytes_if(const std::string& key, const std::string& bytes, const S3Condition& condition);
  /// The object with its ETag; nullopt when it does not exist.
  std::optional<S3Versioned> get_versioned(const std::string& key);
  /// Multipart above options.part_bytes; `on_part(number)` after each part is stored.
  void put_file(const std::string& key, const std::filesystem::path& file, const std::function<void(int)>& on_part = nullptr);
  std::string get_bytes(const std::string& key);
  /// nullopt when the object does not exist.
  std::optional<std::string> get_bytes_if_exists(const std::string& key);
  /// Writes the object to `file` (replaced); returns its size.
  uint64_t get_file(const std::string& key, const std::filesystem::path& file);
  /// Every object whose key starts with `prefix`, in key order.
  std::vector<S3Object> list(const std::string& prefix);
  void remove(const std::string& key);
  /// Aborts the multipart uploads under `prefix` that were never completed (left by a kill).
  int abort_unfinished_uploads(const std::string& prefix);

  /// From now on a request in flight or waiting to retry gives up at `deadline` (a pre-emption's
  /// notice is short); nullopt lifts it.
  void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline);
  /// Every request in flight now (on any thread) stops at once and throws RemoteCancelled, without
  /// retrying; requests started afterwards run as usual (a multipart upload's abort among them).
  void cancel_requests_in_flight();

 private:
  struct Response {
    long status = 0;
    std::string body;
    std::string etag;
  };
  struct Request;
  Response perform(const Request& request);
  Response perform_once(const Request& request, std::string& transport_error);
  std::string url_of(const std::string& key, const std::string& query) const;
  [[noreturn]] void fail(const Request& request, const Response& response) const;
  void put_part_range(const std::string& key, const std::filesystem::path& file, uint64_t offset, uint64_t length,
                      const std::string& query, std::string* etag);

  S3Location location_;
  S3ClientOptions options_;
  std::string access_key_, secret_key_, session_token_;
  std::atomic<int64_t> deadline_ns_{0};  // steady_clock nanoseconds; 0 = none
  std::atomic<int64_t> cancel_epoch_{0};  // a request started in an older epoch is cancelled
};

}  // namespace frugal
