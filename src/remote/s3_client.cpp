#include "frugal/remote/s3_client.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "frugal/log.hpp"
#include "remote/detail/web_libraries.hpp"
#include "remote/s3_xml.hpp"

namespace frugal {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// RFC 3986 percent-encoding as SigV4 wants it; '/' kept in keys (S3 does not double-encode paths).
std::string encode(const std::string& text, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The query string in SigV4's canonical form (names sorted, values encoded): libcurl 7.88 signs
// the query as it is written, so it must be written canonically.
std::string query_of(const std::map<std::string, std::string>& parameters) {
  std::string query;
  for (const auto& [name, value] : parameters) query += (query.empty() ? "" : "&") + encode(name, false) + "=" + encode(value, false);
  return query;
}

std::string digest(const EVP_MD* md, const std::function<void(EVP_MD_CTX*)>& feed, bool base64) {
  const auto& ssl = detail::crypto();
  std::unique_ptr<EVP_MD_CTX, decltype(ssl.md_ctx_free)> ctx(ssl.md_ctx_new(), ssl.md_ctx_free);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!ctx || ssl.digest_init(ctx.get(), md, nullptr) != 1) throw RemoteStorageError("OpenSSL cannot start a digest");
  feed(ctx.get());
  ssl.digest_final(ctx.get(), out, &n);
  if (base64) {
    std::string encoded(4 * ((n + 2) / 3) + 1, '\0');
    const int len = ssl.encode_block(reinterpret_cast<unsigned char*>(encoded.data()), out, static_cast<int>(n));
    encoded.resize(static_cast<size_t>(len));
    return encoded;
  }
  static const char* hex = "0123456789abcdef";
  std::string text;
  for (unsigned int i = 0; i < n; ++i) {
    text += hex[out[i] >> 4];
    text += hex[out[i] & 15];
  }
  return text;
}

std::string md5_base64(const std::string& bytes) {
  return digest(detail::crypto().md5(), [&](EVP_MD_CTX* c) { detail::crypto().digest_update(c, bytes.data(), bytes.size()); }, true);
}

std::string sha256_hex(const std::string& bytes) {
  return digest(detail::crypto().sha256(), [&](EVP_MD_CTX* c) { detail::crypto().digest_update(c, bytes.data(), bytes.size()); }, false);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string md5_base64_of_range(int fd, uint64_t offset, uint64_t length, const fs::path& file) {
  return digest(detail::crypto().md5(), [&](EVP_MD_CTX* c) {
    std::vector<char> buffer(1 << 20);
    uint64_t done = 0;
    while (done < length) {
      const ssize_t n = ::pread(fd, buffer.data(), std::min<uint64_t>(buffer.size(), length - done), static_cast<off_t>(offset + done));
      if (n <= 0) throw RemoteStorageError("cannot read " + file.string() + " to upload it: " + (n < 0 ? std::strerror(errno) : "it became shorter"));
      detail::crypto().digest_update(c, buffer.data(), static_cast<size_t>(n));
      done += static_cast<uint64_t>(n);
    }
  }, true);
}

bool retryable_status(long status, const std::string& code) {
  if (status == 429 || status >= 500) return true;
  return code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable";
}

std::string trim_endpoint(std::string endpoint) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint;
}

}  // namespace

S3ClientOptions S3ClientOptions::resolved() const {
  S3ClientOptions o = *this;
  if (o.region.empty()) o.region = environment("AWS_REGION");
  if (o.region.empty()) o.region = environment("AWS_DEFAULT_REGION");
  if (o.region.empty()) o.region = "us-east-1";
  if (o.endpoint.empty()) o.endpoint = environment("AWS_ENDPOINT_URL_S3");
  if (o.endpoint.empty()) o.endpoint = environment("AWS_ENDPOINT_URL");
  const bool custom = !o.endpoint.empty();
  if (!custom) o.endpoint = "https://s3." + o.region + ".amazonaws.com";
  o.endpoint = trim_endpoint(o.endpoint);
  if (o.endpoint.rfind("http://", 0) != 0 && o.endpoint.rfind("https://", 0) != 0) {
    throw OptionError("remote_endpoint", "the S3 endpoint '" + o.endpoint + "' must start with http:// or https://");
  }
  if (o.endpoint.find('/', o.endpoint.find("//") + 2) != std::string::npos) {
    throw OptionError("remote_endpoint", "the S3 endpoint '" + o.endpoint + "' must be a scheme and host[:port] only, without a path");
  }
  if (o.addressing == S3Addressing::automatic) o.addressing = custom ? S3Addressing::path : S3Addressing::virtual_host;
  if (o.max_attempts < 1) throw OptionError("max_attempts", "max_attempts must be >= 1");
  if (o.parallel_parts < 1) throw OptionError("parallel_parts", "parallel_parts must be >= 1");
  if (o.part_bytes < 1024) throw OptionError("part_bytes", "part_bytes must be >= 1024");
  if (!(o.connect_timeout_seconds > 0) || !(o.stall_timeout_seconds > 0)) {
    throw OptionError("stall_timeout_seconds", "the S3 client's timeouts must be > 0");
  }
  return o;
}

struct S3Client::Request {
  std::string method = "GET";
  std::string key;    // "" = the bucket itself
  std::string query;  // canonical (query_of)
  const std::string* body = nullptr;
  const fs::path* file = nullptr;  // or the body is this range of a file
  uint64_t offset = 0, length = 0;
  const fs::path* to_file = nullptr;  // a GET's body goes here
  std::string content_md5;
  std::string content_type;
  int max_attempts = 0;  // 0 = the options'
  std::vector<std::string> headers;  // more headers (conditional writes)
  int64_t epoch = 0;                  // set by perform: the cancel epoch it started in
  std::vector<long> accepted;  // statuses that are not failures besides 2xx (e.g. 404 to probe)
};

S3Client::S3Client(S3Location location, S3ClientOptions options)
    : location_(std::move(location)), options_(options.resolved()) {
  detail::curl();  // the libraries load (or say what is missing) before anything depends on them
  detail::crypto();
  access_key_ = environment("AWS_ACCESS_KEY_ID");
  secret_key_ = environment("AWS_SECRET_ACCESS_KEY");
  session_token_ = environment("AWS_SESSION_TOKEN");
  if (access_key_.empty() || secret_key_.empty()) {
    throw OptionError("remote", "checkpoints on " + location_.url() + " need credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (" +
                                    std::string(access_key_.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") + " is not set)");
  }
}

S3Client::~S3Client() = default;

void S3Client::set_deadline(std::optional<Clock::time_point> deadline) {
  deadline_ns_ = deadline ? std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count()) : 0;
}

std::string S3Client::url_of(const std::string& key, const std::string& query) const {
  std::string url;
  if (options_.addressing == S3Addressing::virtual_host) {
    const auto host = options_.endpoint.find("//") + 2;
    url = options_.endpoint.substr(0, host) + location_.bucket + "." + options_.endpoint.substr(host) + "/" + encode(key, true);
  } else {
    url = options_.endpoint + "/" + location_.bucket + (key.empty() ? "" : "/" + encode(key, true));
  }
  return query.empty() ? url : url + "?" + query;
}

namespace {

// One attempt's state, seen by libcurl's callbacks.
struct Transfer {
  int fd_in = -1;              // the body: a range of this file...
  uint64_t offset = 0, length = 0, sent = 0;
  const std::string* memory = nullptr;  // ...or these bytes
  int fd_out = -1;             // a successful GET's body goes here, else into `body`
  std::string body;
  std::string etag;
  CURL* curl = nullptr;
  int64_t deadline_ns = 0;
  const std::atomic<int64_t>* live_deadline = nullptr;
  const std::atomic<int64_t>* cancel_epoch = nullptr;
  int64_t epoch = 0;           // the cancel epoch the request started in
  std::string local_error;     // a read or write of ours that failed
};

size_t read_body(char* buffer, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const uint64_t want = std::min<uint64_t>(size * count, t->length - t->sent);
  if (want == 0) return 0;
  if (t->memory != nullptr) {
    std::memcpy(buffer, t->memory->data() + t->sent, want);
    t->sent += want;
    return want;
  }
  const ssize_t n = ::pread(t->fd_in, buffer, want, static_cast<off_t>(t->offset + t->sent));
  if (n <= 0) {
    t->local_error = n < 0 ? std::strerror(errno) : "the file became shorter while it was uploaded";
    return CURL_READFUNC_ABORT;
  }
  t->sent += static_cast<uint64_t>(n);
  return static_cast<size_t>(n);
}

long status_of(CURL* curl) {
  long status = 0;
  detail::curl().easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

size_t write_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  const long status = status_of(t->curl);
  if (t->fd_out >= 0 && status >= 200 && status < 300) {
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(t->fd_out, data + done, n - done);
      if (w <= 0) {
        t->local_error = std::strerror(errno);
        return 0;  // aborts the transfer
      }
      done += static_cast<size_t>(w);
    }
    return n;
  }
  if (t->body.size() < (size_t{64} << 20)) t->body.append(data, n);
  return n;
}

size_t read_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * count);
  if (line.size() > 5 && strncasecmp(line.c_str(), "etag:", 5) == 0) {
    std::string value = line.substr(5);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.erase(0, 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
    t->etag = value;
  }
  return size * count;
}

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// Called as the transfer runs: a deadline set meanwhile (a pre-emption) stops it.
int progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  const int64_t deadline = t->live_deadline->load();
  return (deadline != 0 && now_ns() > deadline) || t->cancel_epoch->load() != t->epoch ? 1 : 0;
}

}  // namespace

S3Client::Response S3Client::perform_once(const Request& r, std::string& transport_error) {
  Transfer t;
  Fd in, out;
  const auto& lib = detail::curl();
  std::unique_ptr<CURL, decltype(lib.easy_cleanup)> curl(lib.easy_init(), lib.easy_cleanup);
  if (!curl) throw RemoteStorageError("libcurl cannot create a handle");
  t.curl = curl.get();
  t.live_deadline = &deadline_ns_;
  t.cancel_epoch = &cancel_epoch_;
  t.epoch = r.epoch;
  CURL* c = curl.get();
  const std::string url = url_of(r.key, r.query);
  lib.easy_setopt(c, CURLOPT_URL, url.c_str());
  lib.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  const std::string sigv4 = "aws:amz:" + options_.region + ":s3";
  lib.easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  lib.easy_setopt(c, CURLOPT_USERNAME, access_key_.c_str());
  lib.easy_setopt(c, CURLOPT_PASSWORD, secret_key_.c_str());
  lib.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_seconds * 1000));
  lib.easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  lib.easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::max(1.0, options_.stall_timeout_seconds)));
  lib.easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  lib.easy_setopt(c, CURLOPT_WRITEDATA, &t);
  lib.easy_setopt(c, CURLOPT_HEADERFUNCTION, read_header);
  lib.easy_setopt(c, CURLOPT_HEADERDATA, &t);
  lib.easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  lib.easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
  lib.easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  if (const int64_t deadline = deadline_ns_.load(); deadline != 0) {
    lib.easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, (deadline - now_ns()) / 1000000)));
  }

  struct curl_slist* headers = nullptr;
  auto header = [&](const std::string& line) { headers = lib.slist_append(headers, line.c_str()); };
  // libcurl 7.88 signs an upload's body as empty unless told its hash: in-memory bodies are
  // hashed; file bodies are sent unsigned and checked by Content-MD5 instead.
  const bool has_body = r.body != nullptr || r.file != nullptr;
  if (r.file != nullptr) {
    header("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  } else {
    header("x-amz-content-sha256: " + sha256_hex(r.body ? *r.body : std::string()));
  }
  if (!r.content_md5.empty()) header("Content-MD5: " + r.content_md5);
  if (!session_token_.empty()) header("x-amz-security-token: " + session_token_);
  if (!r.content_type.empty()) header("Content-Type: " + r.content_type);
  for (const auto& line : r.headers) header(line);
  // (No "Expect:" to drop 100-continue: libcurl 7.88 would sign the header it then leaves out.)
  std::unique_ptr<curl_slist, decltype(lib.slist_free_all)> header_list(headers, lib.slist_free_all);
  lib.easy_setopt(c, CURLOPT_HTTPHEADER, headers);

  if (r.file != nullptr) {
    in.fd = ::open(r.file->c_str(), O_RDONLY | O_CLOEXEC);
    if (in.fd < 0) throw RemoteStorageError("cannot open " + r.file->string() + " to upload it: " + std::strerror(errno));
    t.fd_in = in.fd;
    t.offset = r.offset;
    t.length = r.length;
  } else if (r.body != nullptr) {
    t.memory = r.body;
    t.length = r.body->size();
  }
  if (r.method == "PUT") {
    lib.easy_setopt(c, CURLOPT_UPLOAD, 1L);
    lib.easy_setopt(c, CURLOPT_READFUNCTION, read_body);
    lib.easy_setopt(c, CURLOPT_READDATA, &t);
    lib.easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(t.length));
  } else if (r.method == "POST") {
    lib.easy_setopt(c, CURLOPT_POST, 1L);
    lib.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(has_body ? t.length : 0));
    lib.easy_setopt(c, CURLOPT_POSTFIELDS, r.body ? r.body->data() : "");
  } else if (r.method == "HEAD") {
    lib.easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (r.method != "GET") {
    lib.easy_setopt(c, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (r.to_file != nullptr) {
    out.fd = ::open(r.to_file->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out.fd < 0) throw RemoteStorageError("cannot create " + r.to_file->string() + ": " + std::strerror(errno));
    t.fd_out = out.fd;
  }

  const CURLcode code = lib.easy_perform(c);
  Response response;
  response.status = status_of(c);
  response.body = std::move(t.body);
  response.etag = t.etag;
  if (!t.local_error.empty()) throw RemoteStorageError(url + ": " + t.local_error);
  if (code != CURLE_OK && cancel_epoch_.load() != r.epoch) {
    throw RemoteCancelled(r.method + " s3://" + location_.bucket + "/" + r.key + ": cancelled (a newer checkpoint goes first)");
  }
  if (code != CURLE_OK) {
    transport_error = code == CURLE_ABORTED_BY_CALLBACK || code == CURLE_OPERATION_TIMEDOUT
                          ? (deadline_ns_.load() != 0 && now_ns() > deadline_ns_.load() ? std::string("the deadline passed")
                                                                                           : lib.easy_strerror(code))
                          : lib.easy_strerror(code);
    response.status = 0;
  }
  return response;
}

S3Client::Response S3Client::perform(const Request& request) {
  Request r = request;
  r.epoch = cancel_epoch_.load();
  const int attempts = r.max_attempts > 0 ? r.max_attempts : options_.max_attempts;
  thread_local std::mt19937_64 jitter(std::random_device{}());
  Response response;
  std::string transport_error;
  for (int attempt = 1;; ++attempt) {
    transport_error.clear();
    response = perform_once(r, transport_error);
    const bool ok = transport_error.empty() &&
                    ((response.status >= 200 && response.status < 300) ||
                     std::find(r.accepted.begin(), r.accepted.end(), response.status) != r.accepted.end());
    if (ok) return response;
    std::string code;
    if (transport_error.empty()) {
      if (const auto error = s3xml::parse_error(response.body)) code = error->code;
      if (!retryable_status(response.status, code)) fail(r, response);
    }
    // Exponential backoff with full jitter: 0.25 s, 0.5 s ... at most 8 s between attempts.
    const double ceiling = std::min(8.0, 0.25 * static_cast<double>(int64_t{1} << std::min(attempt - 1, 10)));
    const double wait = std::uniform_real_distribution<double>(0.5 * ceiling, ceiling)(jitter);
    const int64_t deadline = deadline_ns_.load();
    const bool past_deadline = deadline != 0 && now_ns() + static_cast<int64_t>(wait * 1e9) > deadline;
    if (attempt >= attempts || past_deadline) {
      if (!transport_error.empty()) {
        throw RemoteStorageError(r.method + " s3://" + location_.bucket + (r.key.empty() ? "" : "/" + r.key) + " at " + options_.endpoint + " failed after " +
                                 std::to_string(attempt) + " attempt(s): " + transport_error);
      }
      fail(r, response);
    }
    log::debug(r.method + " " + r.key + ": attempt " + std::to_string(attempt) + " failed (" +
               (transport_error.empty() ? "HTTP " + std::to_string(response.status) + " " + code : transport_error) + "), retrying");
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    if (cancel_epoch_.load() != r.epoch) {
      throw RemoteCancelled(r.method + " s3://" + location_.bucket + "/" + r.key + ": cancelled (a newer checkpoint goes first)");
    }
  }
}

void S3Client::fail(const Request& r, const Response& response) const {
  std::string code, message;
  if (const auto error = s3xml::parse_error(response.body)) {
    code = error->code;
    message = error->message;
  }
  std::string text = r.method + " s3://" + location_.bucket + (r.key.empty() ? "" : "/" + r.key) + " at " + options_.endpoint + ": HTTP " +
                     std::to_string(response.status) + (code.empty() ? "" : " " + code) + (message.empty() ? "" : " (" + message + ")");
  if (code == "NoSuchBucket" || (response.status == 404 && r.key.empty())) text += ": the bucket " + location_.bucket + " does not exist";
  if (code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId" || code == "AccessDenied" || response.status == 403) {
    text += ": check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_REGION) for this store";
  }
  throw RemoteStorageError(text, response.status, code);
}

void S3Client::check_access() {
  Request r;
  r.query = query_of({{"list-type", "2"}, {"max-keys", "1"}, {"prefix", location_.prefix}});
  r.max_attempts = 3;
  perform(r);
}

void S3Client::put_bytes(const std::string& key, const std::string& bytes) {
  Request r;
  r.method = "PUT";
  r.key = key;
  r.body = &bytes;
  r.content_md5 = md5_base64(bytes);
  perform(r);
}

std::optional<std::string> S3Client::put_bytes_if(const std::string& key, const std::string& bytes, const S3Condition& condition) {
  Request r;
  r.method = "PUT";
  r.key = key;
  r.body = &bytes;
  r.content_md5 = md5_base64(bytes);
  if (condition.only_if_absent) r.headers.push_back("If-None-Match: *");
  if (!condition.if_match.empty()) r.headers.push_back("If-Match: " + condition.if_match);
  r.accepted = {409, 412};
  const Response response = perform(r);
  if (response.status == 409 || response.status == 412) return std::nullopt;
  return response.etag;
}

std::optional<S3Versioned> S3Client::get_versioned(const std::string& key) {
  Request r;
  r.key = key;
  r.accepted = {404};
  const Response response = perform(r);
  if (response.status == 404) {
    const auto error = s3xml::parse_error(response.body);
    if (error && error->code == "NoSuchBucket") fail(r, response);
    return std::nullopt;
  }
  return S3Versioned{response.body, response.etag};
}

void S3Client::cancel_requests_in_flight() { ++cancel_epoch_; }

void S3Client::put_part_range(const std::string& key, const fs::path& file, uint64_t offset, uint64_t length, const std::string& query,
                              std::string* etag) {
  Fd fd;
  fd.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd.fd < 0) throw RemoteStorageError("cannot open " + file.string() + " to upload it: " + std::strerror(errno));
  Request r;
  r.method = "PUT";
  r.key = key;
  r.query = query;
  r.file = &file;
  r.offset = offset;
  r.length = length;
  r.content_md5 = md5_base64_of_range(fd.fd, offset, length, file);
  const Response response = perform(r);
  if (etag != nullptr) {
    if (response.etag.empty()) throw RemoteStorageError("the store gave no ETag for part " + query + " of " + key);
    *etag = response.etag;
  }
}

void S3Client::put_file(const std::string& key, const fs::path& file, const std::function<void(int)>& on_part) {
  std::error_code ec;
  const uint64_t size = fs::file_size(file, ec);
  if (ec) throw RemoteStorageError("cannot upload " + file.string() + ": " + ec.message());
  if (size <= options_.part_bytes) {
    put_part_range(key, file, 0, size, "", nullptr);
    return;
  }
  Request create;
  create.method = "POST";
  create.key = key;
  create.query = query_of({{"uploads", ""}});
  const std::string upload_id = s3xml::parse_upload_id(perform(create).body);
  const size_t parts = static_cast<size_t>((size + options_.part_bytes - 1) / options_.part_bytes);
  std::vector<std::string> etags(parts);
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr first_error;
  const int64_t epoch = cancel_epoch_.load();  // a cancel stops the parts not yet begun too
  auto work = [&] {
    for (size_t i = next++; i < parts; i = next++) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (first_error) return;
        if (cancel_epoch_.load() != epoch) {
          first_error = std::make_exception_ptr(RemoteCancelled("PUT s3://" + location_.bucket + "/" + key + ": cancelled (a newer checkpoint goes first)"));
          return;
        }
      }
      try {
        const uint64_t offset = i * options_.part_bytes;
        put_part_range(key, file, offset, std::min(options_.part_bytes, size - offset),
                       query_of({{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}}), &etags[i]);
        std::lock_guard<std::mutex> lock(mutex);
        if (on_part) on_part(static_cast<int>(i + 1));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first_error) first_error = std::current_exception();
        return;
      }
    }
  };
  std::vector<std::thread> workers;
  const size_t n_workers = std::min(parts, static_cast<size_t>(options_.parallel_parts));
  for (size_t w = 1; w < n_workers; ++w) workers.emplace_back(work);
  work();
  for (auto& w : workers) w.join();
  auto abort_upload = [&] {
    Request abort;
    abort.method = "DELETE";
    abort.key = key;
    abort.query = query_of({{"uploadId", upload_id}});
    abort.max_attempts = 2;
    abort.accepted = {404};
    try {
      perform(abort);
    } catch (const std::exception& e) {
      log::warn(std::string("could not abort the unfinished upload of ") + key + ": " + e.what() + " (it is aborted at the next start)");
    }
  };
  if (!first_error && cancel_epoch_.load() != epoch) {
    first_error = std::make_exception_ptr(RemoteCancelled("PUT s3://" + location_.bucket + "/" + key + ": cancelled (a newer checkpoint goes first)"));
  }
  if (first_error) {
    abort_upload();
    std::rethrow_exception(first_error);
  }
  Request complete;
  complete.method = "POST";
  complete.key = key;
  complete.query = query_of({{"uploadId", upload_id}});
  const std::string body = s3xml::complete_upload_body(etags);
  complete.body = &body;
  complete.content_type = "application/xml";
  try {
    // A completion can fail after its 200 status: the error is in the body.
    const Response response = perform(complete);
    if (const auto error = s3xml::parse_error(response.body)) {
      throw RemoteStorageError("completing the upload of " + key + " at " + options_.endpoint + " failed: " + error->code + " (" + error->message + ")",
                               response.status, error->code);
    }
  } catch (...) {
    abort_upload();
    throw;
  }
}

std::optional<std::string> S3Client::get_bytes_if_exists(const std::string& key) {
  auto object = get_versioned(key);
  if (!object) return std::nullopt;
  return std::move(object->bytes);
}

std::string S3Client::get_bytes(const std::string& key) {
  Request r;
  r.key = key;
  return perform(r).body;
}

uint64_t S3Client::get_file(const std::string& key, const fs::path& file) {
  Request r;
  r.key = key;
  r.to_file = &file;
  perform(r);
  return fs::file_size(file);
}

std::vector<S3Object> S3Client::list(const std::string& prefix) {
  std::vector<S3Object> objects;
  std::string token;
  for (;;) {
    std::map<std::string, std::string> parameters{{"list-type", "2"}, {"prefix", prefix}};
    if (!token.empty()) parameters["continuation-token"] = token;
    Request r;
    r.query = query_of(parameters);
    const s3xml::ObjectListing page = s3xml::parse_object_listing(perform(r).body);
    for (const auto& o : page.objects) objects.push_back({o.key, o.size});
    if (!page.truncated) break;
    if (page.next_token == token) throw RemoteStorageError("the store's listing of " + prefix + " repeats its continuation token");
    token = page.next_token;
  }
  std::sort(objects.begin(), objects.end(), [](const S3Object& a, const S3Object& b) { return a.key < b.key; });
  return objects;
}

void S3Client::remove(const std::string& key) {
  Request r;
  r.method = "DELETE";
  r.key = key;
  r.accepted = {404};
  perform(r);
}

int S3Client::abort_unfinished_uploads(const std::string& prefix) {
  int aborted = 0;
  std::string key_marker, id_marker;
  for (int page_count = 0; page_count < 10000; ++page_count) {
    std::map<std::string, std::string> parameters{{"prefix", prefix}, {"uploads", ""}};
    if (!key_marker.empty()) parameters["key-marker"] = key_marker;
    if (!id_marker.empty()) parameters["upload-id-marker"] = id_marker;
    Request r;
    r.query = query_of(parameters);
    const s3xml::UploadListing page = s3xml::parse_upload_listing(perform(r).body);
    for (const auto& u : page.uploads) {
      Request abort;
      abort.method = "DELETE";
      abort.key = u.key;
      abort.query = query_of({{"uploadId", u.upload_id}});
      abort.accepted = {404};
      perform(abort);
      ++aborted;
    }
    if (!page.truncated) break;
    if (page.next_key_marker == key_marker && page.next_upload_id_marker == id_marker) break;
    key_marker = page.next_key_marker;
    id_marker = page.next_upload_id_marker;
  }
  return aborted;
}

}  // namespace frugal
