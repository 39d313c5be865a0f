#include "frugal/remote/remote_options.hpp"

#include <c10/util/StringUtil.h>

#include <cmath>

#include "frugal/remote/s3_client.hpp"

namespace frugal {

void RemoteOptions::validate() const {
  if (!url().empty()) S3Location::parse(url(), "remote");
  if (!(deadline_seconds() > 0)) {
    throw OptionError("remote_deadline_seconds", c10::str("remote_deadline_seconds must be > 0, got ", deadline_seconds()));
  }
  if (part_mb() < 5 || part_mb() > 5120) {
    throw OptionError("remote_part_mb", c10::str("remote_part_mb must be 5..5120 (S3's part sizes), got ", part_mb()));
  }
  if (parallel_parts() < 1 || parallel_parts() > 64) {
    throw OptionError("remote_parallel_parts", c10::str("remote_parallel_parts must be 1..64, got ", parallel_parts()));
  }
  if (!(lease_seconds() > 0) || !std::isfinite(lease_seconds())) {
    throw OptionError("remote_lease_seconds", c10::str("remote_lease_seconds must be > 0, got ", lease_seconds()));
  }
}

S3ClientOptions RemoteOptions::client_options() const {
  S3ClientOptions o;
  o.endpoint = endpoint();
  o.region = region();
  o.addressing = addressing();
  o.part_bytes = static_cast<uint64_t>(part_mb()) << 20;
  o.parallel_parts = static_cast<int>(parallel_parts());
  return o;
}

}  // namespace frugal
