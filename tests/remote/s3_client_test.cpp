// The S3 client against a real server: tests/remote/client_test.sh starts SeaweedFS on loopback
// with authentication, creates the bucket FRUGAL_TEST_S3_BUCKET and exports the AWS_* variables.
// Checks without a server (URL parsing, options) run everywhere.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "frugal/frugal.hpp"
#include "frugal/remote/prefix_lease.hpp"
#include "frugal/remote/remote_checkpoints.hpp"
#include "frugal/remote/s3_client.hpp"
#include "support/fixtures.hpp"

namespace fs = std::filesystem;

namespace {

std::string server_bucket() {
  const char* bucket = std::getenv("FRUGAL_TEST_S3_BUCKET");
  return bucket ? bucket : "";
}

#define REQUIRE_SERVER()                                                         \
  if (server_bucket().empty()) {                                                 \
    WARN("SKIPPED: no S3 server (run through tests/remote/client_test.sh)");     \
    return;                                                                      \
  }

frugal::S3Location in_bucket(const std::string& prefix) { return {server_bucket(), prefix}; }

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (auto& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

struct EnvOverride {  // sets a variable for one scope
  EnvOverride(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvOverride() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("s3:// URLs: bucket and prefix, and a clear error naming the option for malformed ones", "[remote]") {
  const auto l = frugal::S3Location::parse("s3://my-bucket/runs/exp1/");
  CHECK(l.bucket == "my-bucket");
  CHECK(l.prefix == "runs/exp1");
  CHECK(l.key("latest") == "runs/exp1/latest");
  CHECK(l.url() == "s3://my-bucket/runs/exp1");
  CHECK(frugal::S3Location::parse("s3://bucket").prefix.empty());
  for (const char* bad : {"s3:/x", "s3://", "http://host/bucket", "bucket/prefix", "s3://Bad_Bucket/x", "s3://ab", "s3://b-ok/a//b", ""}) {
    INFO(bad);
    try {
      frugal::S3Location::parse(bad, "checkpoint.remote");
      FAIL("accepted");
    } catch (const frugal::OptionError& e) {
      CHECK(e.option() == "checkpoint.remote");
      CHECK(std::string(e.what()).find("checkpoint.remote") != std::string::npos);
    }
  }
}

TEST_CASE("S3 options: endpoint and region from the AWS variables, bad values named, credentials required", "[remote]") {
  EnvOverride endpoint("AWS_ENDPOINT_URL", "http://127.0.0.1:9/");
  EnvOverride endpoint_s3("AWS_ENDPOINT_URL_S3", nullptr);
  EnvOverride region("AWS_REGION", "eu-west-3");
  const auto o = frugal::S3ClientOptions().resolved();
  CHECK(o.endpoint == "http://127.0.0.1:9");
  CHECK(o.region == "eu-west-3");
  CHECK(o.addressing == frugal::S3Addressing::path);
  {
    EnvOverride none("AWS_ENDPOINT_URL", nullptr);
    const auto aws = frugal::S3ClientOptions().resolved();
    CHECK(aws.endpoint == "https://s3.eu-west-3.amazonaws.com");
    CHECK(aws.addressing == frugal::S3Addressing::virtual_host);
  }
  frugal::S3ClientOptions bad;
  bad.endpoint = "127.0.0.1:9000";
  CHECK_THROWS_AS(bad.resolved(), frugal::OptionError);
  bad.endpoint = "http://host:9000/path";
  CHECK_THROWS_AS(bad.resolved(), frugal::OptionError);
  CHECK_FALSE(frugal::parse_enum<frugal::S3Addressing>("sideways"));

  EnvOverride key("AWS_ACCESS_KEY_ID", nullptr);
  try {
    frugal::S3Client client({"bucket", ""}, {});
    FAIL("a client without credentials");
  } catch (const frugal::OptionError& e) {
    CHECK(std::string(e.what()).find("AWS_ACCESS_KEY_ID") != std::string::npos);
  }
}

TEST_CASE("S3 client: put, get, list, delete; a multipart upload with parallel parts reads back equal", "[remote]") {
  REQUIRE_SERVER();
  frugal::S3ClientOptions options;
  options.part_bytes = 5 << 20;  // S3's smallest part
  options.parallel_parts = 3;
  frugal::S3Client s3(in_bucket("client-basic"), options);
  s3.check_access();
  s3.put_bytes(s3.location().key("a.txt"), "hello");
  CHECK(s3.get_bytes(s3.location().key("a.txt")) == "hello");
  CHECK_FALSE(s3.get_bytes_if_exists(s3.location().key("missing")).has_value());

  const fs::path dir = fs::temp_directory_path() / ("frugal_s3_client_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string big = random_bytes((5 << 20) * 2 + 123, 7);  // 3 parts, the last short
  std::ofstream(dir / "big.bin", std::ios::binary) << big;
  int parts = 0;
  s3.put_file(s3.location().key("big.bin"), dir / "big.bin", [&](int) { ++parts; });
  CHECK(parts == 3);
  CHECK(s3.get_file(s3.location().key("big.bin"), dir / "back.bin") == big.size());
  std::ifstream in(dir / "back.bin", std::ios::binary);
  const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(back == big);

  const auto listed = s3.list(s3.location().key(""));
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].key == "client-basic/a.txt");
  CHECK(listed[1].key == "client-basic/big.bin");
  CHECK(listed[1].size == big.size());
  s3.remove(s3.location().key("a.txt"));
  s3.remove(s3.location().key("a.txt"));  // deleting what is gone is not an error
  CHECK(s3.list(s3.location().key("")).size() == 1);
  CHECK(s3.abort_unfinished_uploads(s3.location().key("")) == 0);  // the multipart upload was completed
  fs::remove_all(dir);
}

TEST_CASE("S3 client: a wrong secret, a missing bucket and an unreachable endpoint are clear errors without the secret", "[remote]") {
  REQUIRE_SERVER();
  {
    EnvOverride secret("AWS_SECRET_ACCESS_KEY", "not-the-secret-1234");
    frugal::S3Client s3(in_bucket("x"), {});
    try {
      s3.check_access();
      FAIL("a wrong secret was accepted");
    } catch (const frugal::RemoteStorageError& e) {
      const std::string text = e.what();
      CHECK(e.http_status() == 403);
      CHECK(text.find("SignatureDoesNotMatch") != std::string::npos);
      CHECK(text.find(server_bucket()) != std::string::npos);
      CHECK(text.find(std::getenv("AWS_ENDPOINT_URL")) != std::string::npos);
      CHECK(text.find("not-the-secret-1234") == std::string::npos);
    }
  }
  {
    frugal::S3Client s3({"no-such-bucket-here", "x"}, {});
    try {
      s3.check_access();
      FAIL("a missing bucket was accepted");
    } catch (const frugal::RemoteStorageError& e) {
      CHECK(e.http_status() == 404);
      CHECK(std::string(e.what()).find("no-such-bucket-here does not exist") != std::string::npos);
    }
  }
  {
    frugal::S3ClientOptions options;
    options.endpoint = "http://127.0.0.1:9";  // discard: nothing listens
    frugal::S3Client s3(in_bucket("x"), options);
    try {
      s3.check_access();
      FAIL("an unreachable endpoint was accepted");
    } catch (const frugal::RemoteStorageError& e) {
      CHECK(std::string(e.what()).find("http://127.0.0.1:9") != std::string::npos);
      CHECK(std::string(e.what()).find("attempt") != std::string::npos);
    }
  }
}

TEST_CASE("S3 client: a deadline stops requests and retries at once", "[remote]") {
  REQUIRE_SERVER();
  frugal::S3ClientOptions options;
  options.endpoint = "http://127.0.0.1:9";
  frugal::S3Client s3(in_bucket("x"), options);
  s3.set_deadline(std::chrono::steady_clock::now() + std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(s3.put_bytes(s3.location().key("k"), "v"), frugal::RemoteStorageError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));  // 8 attempts would take ~30 s
}

TEST_CASE("remote checkpoints: only committed ones are listed; leftovers of a kill are removed; retention keeps the newest", "[remote]") {
  REQUIRE_SERVER();
  frugal::RemoteCheckpoints remote(in_bucket("ckpts"), {});
  auto& s3 = remote.client();
  const fs::path root = fs::temp_directory_path() / ("frugal_remote_ckpts_" + std::to_string(::getpid()));
  for (int step : {3, 6, 9}) {
    const fs::path dir = root / ("ckpt-00000000" + std::to_string(step));
    fs::create_directories(dir);
    std::ofstream(dir / "state.pt") << "state " << step;
    std::ofstream(dir / "manifest.json") << R"({"files": [{"name": "state.pt", "size": 7, "crc32": 0}]})";
    remote.upload_files(dir, {"state.pt"});
    if (step != 9) remote.commit(dir);  // 9: killed before its manifest
  }
  auto committed = remote.committed();
  REQUIRE(committed.size() == 2);
  CHECK(committed[1].name == "ckpt-000000006");
  CHECK(s3.get_bytes(s3.location().key("latest")) == "ckpt-000000006");
  CHECK(remote.download("ckpt-000000009", root / "dl9") == "it has no manifest.json: never committed (an upload that did not finish)");
  CHECK(remote.download("ckpt-000000012", root / "dl12") == "there is no such checkpoint");
  CHECK(remote.download("ckpt-000000006", root / "dl6").empty());
  CHECK(fs::file_size(root / "dl6" / "state.pt") == 7);
  remote.remove_unfinished();
  CHECK(s3.list(s3.location().key("ckpt-000000009/")).empty());
  remote.apply_retention({1, 0, "loss", frugal::MonitorMode::min}, "ckpt-000000006");
  committed = remote.committed();
  REQUIRE(committed.size() == 1);
  CHECK(committed[0].step == 6);
  fs::remove_all(root);
}

namespace {

// A lease object as another run would write it.
std::string foreign_lease(const std::string& host, const std::string& boot, int64_t pid, double renewed_unix, int64_t renewals = 0) {
  return nlohmann::json{{"frugal_lease", 1}, {"run_id", "foreign-" + std::to_string(renewals)}, {"host", host}, {"boot_id", boot},
                        {"pid", pid}, {"run_dir", "elsewhere"}, {"lease_seconds", 2.0}, {"renewals", renewals},
                        {"renewed_unix", renewed_unix}}
      .dump();
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

TEST_CASE("prefix lease: one holder; a live one refuses the next run by name, a stale one is taken over, a lost one stops writes",
          "[remote]") {
  REQUIRE_SERVER();
  const auto location = in_bucket("leased");
  frugal::S3Client s3(location, {});
  const std::string key = frugal::PrefixLease::key_of(location);
  frugal::PrefixLeaseOptions quick{2.0, "runs/first"};
  {
    auto first = frugal::PrefixLease::acquire(location, {}, quick);
    CHECK(first->conditional_writes());  // SeaweedFS honours If-None-Match
    CHECK(s3.get_bytes(key).find(first->run_id()) != std::string::npos);
    // A second run while the first renews: refused after seeing a renewal, naming the holder.
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(frugal::PrefixLease::acquire(location, {}, {2.0, "runs/second"}),
                      Catch::Contains("is in use") && Catch::Contains(first->run_id()) && Catch::Contains("runs/first") &&
                          Catch::Contains("pid " + std::to_string(::getpid())));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
    // Taken over behind its back: it notices at its next renewal and writes nothing more.
    s3.put_bytes(key, foreign_lease("elsewhere", "another-boot", 1, unix_now()));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    CHECK_FALSE(first->held());
    CHECK_THROWS_WITH(first->check_held(), Catch::Contains("taken over"));
    frugal::RemoteCheckpoints remote(location, {});
    remote.set_lease(std::shared_ptr<const frugal::PrefixLease>(first.get(), [](const frugal::PrefixLease*) {}));
    CHECK_THROWS_WITH(remote.remove_unfinished(), Catch::Contains("taken over"));
  }
  CHECK(s3.get_bytes_if_exists(key).has_value());  // a lost lease is not released: it is someone else's

  // Stale for sure (not renewed for far longer than its duration): taken over at once.
  s3.put_bytes(key, foreign_lease("gone-host", "gone-boot", 1, unix_now() - 3600));
  auto start = std::chrono::steady_clock::now();
  {
    auto taker = frugal::PrefixLease::acquire(location, {}, quick);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    CHECK(taker->held());
  }
  CHECK_FALSE(s3.get_bytes_if_exists(key).has_value());  // released at the end

  // Recent but never renewed again (its holder died a moment ago on another machine): taken
  // over after one lease duration of watching.
  s3.put_bytes(key, foreign_lease("other-host", "other-boot", 1, unix_now()));
  start = std::chrono::steady_clock::now();
  {
    auto taker = frugal::PrefixLease::acquire(location, {}, quick);
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(waited >= std::chrono::seconds(2));
    CHECK(waited < std::chrono::seconds(8));
  }
  // Renewed by a live holder on another machine meanwhile: refused.
  s3.put_bytes(key, foreign_lease("other-host", "other-boot", 1, unix_now()));
  std::atomic<bool> renewing{true};
  std::thread holder([&] {
    for (int64_t n = 1; renewing; ++n) {
      frugal::S3Client(location, {}).put_bytes(key, foreign_lease("other-host", "other-boot", 1, unix_now(), n));
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    }
  });
  CHECK_THROWS_WITH(frugal::PrefixLease::acquire(location, {}, quick), Catch::Contains("is in use") && Catch::Contains("other-host"));
  renewing = false;
  holder.join();
  s3.remove(key);
}

TEST_CASE("[gpu] a CUDA run commits its checkpoint to the store and a fresh directory resumes from it as an uninterrupted run", "[remote][gpu]") {
  if (!torch::cuda::is_available()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  REQUIRE_SERVER();
  auto train = [](const fs::path& run_dir, int64_t steps, const std::string& remote) {
    torch::manual_seed(5);
    frugal::testing::TinyNet net;
    frugal::Trainer trainer(frugal::Model(net.ptr(), frugal::testing::cross_entropy()), frugal::testing::sgd(0.05),
                            frugal::testing::blobs(96), frugal::TrainerOptions().device("cuda").run_dir(run_dir.string()).max_steps(steps),
                            frugal::DataLoaderOptions().batch_size(8).seed(3));
    if (!remote.empty()) {
      frugal::add_checkpointing(trainer, std::make_shared<frugal::CheckpointPolicy>(frugal::CheckpointOptions().every_n_steps(3).remote(frugal::RemoteOptions().url(remote))));
    }
    trainer.fit();
    return frugal::testing::flat_parameters(*net).cpu();
  };
  const fs::path root = frugal::testing::scratch_dir("remote_gpu");
  const torch::Tensor whole = train(root / "whole", 12, "");
  const std::string remote = "s3://" + server_bucket() + "/gpu";
  train(root / "first", 6, remote);
  const torch::Tensor resumed = train(root / "fresh", 12, remote);  // an empty run directory: from the store
  CHECK(fs::exists(root / "fresh" / "checkpoints" / "ckpt-000000012"));
  CHECK(torch::allclose(resumed, whole, 1e-6, 1e-7));
}
