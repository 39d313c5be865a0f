// libFuzzer target: an S3 store's XML answers (listings, multipart uploads, errors), as a server
// may send them, broken or hostile. Seeds: tests/fuzz/corpus/s3_xml.
#include "fuzz_support.hpp"
#include "remote/s3_xml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(frugal::fuzz::bytes_of(data, size));
  frugal::fuzz::expect_frugal_errors([&] { frugal::s3xml::parse_object_listing(body); });
  frugal::fuzz::expect_frugal_errors([&] { frugal::s3xml::parse_upload_listing(body); });
  frugal::fuzz::expect_frugal_errors([&] { frugal::s3xml::parse_upload_id(body); });
  frugal::fuzz::expect_frugal_errors([&] { frugal::s3xml::parse_error(body); });
  return 0;
}
