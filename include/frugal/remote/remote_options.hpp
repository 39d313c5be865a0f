#pragma once
// The options of checkpoints in object storage (CheckpointOptions::remote; config keys
// checkpoint.remote, checkpoint.remote_endpoint, ...). On when `url` is set.

#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <string>

#include "frugal/base/enum_names.hpp"

namespace frugal {

/// Where the request names the bucket: in the path (http://host/bucket/key) or in the host name
/// (http://bucket.host/key); automatic: the path with a custom endpoint, the host name on AWS.
enum class S3Addressing { automatic, path, virtual_host };
constexpr std::array<EnumName<S3Addressing>, 3> names_of(S3Addressing) {
  return {{{S3Addressing::automatic, "auto"}, {S3Addressing::path, "path"}, {S3Addressing::virtual_host, "virtual"}}};
}

struct S3ClientOptions;

struct RemoteOptions {
  /// s3://bucket/prefix: also keep checkpoints in object storage ("" = local only). Credentials
  /// from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN.
  TORCH_ARG(std::string, url) = "";
  /// The store's scheme://host[:port]; "" = AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS S3.
  TORCH_ARG(std::string, endpoint) = "";
  TORCH_ARG(std::string, region) = "";  // "" = AWS_REGION, AWS_DEFAULT_REGION, us-east-1
  TORCH_ARG(S3Addressing, addressing) = S3Addressing::automatic;
  /// How long a pre-emption or the end of a fit waits for the checkpoint's remote commit.
  TORCH_ARG(double, deadline_seconds) = 90;
  TORCH_ARG(int64_t, part_mb) = 64;        // multipart part size (S3's minimum: 5)
  TORCH_ARG(int64_t, parallel_parts) = 4;  // parts uploaded at once
  /// The prefix's lease (frugal/remote/prefix_lease.hpp): one run writes a prefix; a lease not
  /// renewed this long is taken over.
  TORCH_ARG(double, lease_seconds) = 60;

 public:  // TORCH_ARG leaves the struct in private:
  bool enabled() const { return !url().empty(); }
  /// OptionError naming the config key's field ("remote_part_mb", ...).
  void validate() const;
  /// The S3 client's options these describe (before the environment fills the gaps).
  S3ClientOptions client_options() const;
};

}  // namespace frugal
