#pragma once
// The S3 API's XML answers, read with pugixml: object listings, multipart upload listings, the
// id of a new multipart upload, and error bodies (which S3 may also send with status 200, e.g. a
// CompleteMultipartUpload that failed after it began). A body that is not what it should be
// throws RemoteStorageError naming what was expected; nothing is found by string search.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace frugal::s3xml {

struct ListedObject {
  std::string key;
  uint64_t size = 0;
};

struct ObjectListing {  // ListObjectsV2
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken
};

struct PendingUpload {
  std::string key;
  std::string upload_id;
};

struct UploadListing {  // ListMultipartUploads
  std::vector<PendingUpload> uploads;
  bool truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};

struct ErrorBody {
  std::string code, message;
};

ObjectListing parse_object_listing(const std::string& body);
UploadListing parse_upload_listing(const std::string& body);
/// InitiateMultipartUploadResult's UploadId.
std::string parse_upload_id(const std::string& body);
/// The <Error> of a body, if it is one (nullopt for any other document, or none).
std::optional<ErrorBody> parse_error(const std::string& body);
/// The CompleteMultipartUpload request body: each part's number and ETag.
std::string complete_upload_body(const std::vector<std::string>& etags);

}  // namespace frugal::s3xml
