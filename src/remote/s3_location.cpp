#include "frugal/remote/s3_client.hpp"

#include <regex>

namespace frugal {

S3Location S3Location::parse(const std::string& url, const std::string& option) {
  const std::string scheme = "s3://";
  auto bad = [&](const std::string& why) {
    return OptionError(option, option + " = '" + url + "' is not an s3://bucket/prefix URL: " + why);
  };
  if (url.rfind(scheme, 0) != 0) {
    const auto colon = url.find(':');
    if (url.rfind("s3:", 0) == 0) throw bad("it needs two slashes after s3:");
    throw bad(colon == std::string::npos ? "it has no s3:// scheme" : "the scheme is '" + url.substr(0, colon) + "', not s3://");
  }
  const std::string rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  S3Location location;
  location.bucket = rest.substr(0, slash);
  // S3's bucket naming rules (3-63 lowercase letters, digits, dots, hyphens; a letter or digit
  // at each end); other stores accept a subset of these names.
  static const std::regex bucket_name("[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]");
  if (location.bucket.empty()) throw bad("the bucket is missing");
  if (!std::regex_match(location.bucket, bucket_name)) {
    throw bad("'" + location.bucket + "' is not a valid bucket name (3-63 lowercase letters, digits, '.' or '-')");
  }
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.find("//") != std::string::npos) throw bad("the prefix has an empty path segment ('//')");
  for (const unsigned char c : prefix) {
    if (c < 0x20 || c == 0x7f) throw bad("the prefix has a control character");
  }
  location.prefix = prefix;
  return location;
}

std::string S3Location::url() const { return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix); }

std::string S3Location::key(const std::string& name) const { return prefix.empty() ? name : prefix + "/" + name; }

}  // namespace frugal
