#include "remote/s3_xml.hpp"

#include <charconv>

#include <pugixml.hpp>
#include <sstream>

#include "frugal/remote/s3_client.hpp"

namespace frugal::s3xml {

namespace {

pugi::xml_document parse(const std::string& body, const char* what) {
  pugi::xml_document doc;
  const pugi::xml_parse_result result = doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8);
  if (!result) {
    throw RemoteStorageError(std::string("the store's answer is not valid XML where ") + what + " was expected (" +
                             result.description() + " at byte offset " + std::to_string(result.offset) + ")");
  }
  return doc;
}

pugi::xml_node root(const pugi::xml_document& doc, const char* name) {
  const pugi::xml_node node = doc.child(name);
  if (!node) {
    const pugi::xml_node first = doc.first_child();
    throw RemoteStorageError(std::string("the store answered <") + (first ? first.name() : "") + "> where <" + name + "> was expected");
  }
  return node;
}

std::string required_text(const pugi::xml_node& parent, const char* name, const char* in) {
  const pugi::xml_node node = parent.child(name);
  if (!node) throw RemoteStorageError(std::string("the store's <") + in + "> has no <" + name + ">");
  return node.text().as_string();
}

bool flag(const pugi::xml_node& parent, const char* name) {
  const std::string text = parent.child(name).text().as_string();
  return text == "true" || text == "True" || text == "1";
}

uint64_t size_of(const pugi::xml_node& node, const std::string& key) {
  const std::string text = node.child("Size").text().as_string();
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    throw RemoteStorageError("the store lists '" + key + "' with size '" + text + "', not a number of bytes");
  }
  return value;
}

}  // namespace

ObjectListing parse_object_listing(const std::string& body) {
  const pugi::xml_document doc = parse(body, "an object listing");
  const pugi::xml_node result = root(doc, "ListBucketResult");
  ObjectListing listing;
  for (const pugi::xml_node& item : result.children("Contents")) {
    ListedObject object;
    object.key = required_text(item, "Key", "Contents");
    object.size = size_of(item, object.key);
    listing.objects.push_back(std::move(object));
  }
  listing.truncated = flag(result, "IsTruncated");
  listing.next_token = result.child("NextContinuationToken").text().as_string();
  if (listing.truncated && listing.next_token.empty()) {
    throw RemoteStorageError("the store's object listing is truncated but gives no NextContinuationToken");
  }
  return listing;
}

UploadListing parse_upload_listing(const std::string& body) {
  const pugi::xml_document doc = parse(body, "a multipart upload listing");
  const pugi::xml_node result = root(doc, "ListMultipartUploadsResult");
  UploadListing listing;
  for (const pugi::xml_node& item : result.children("Upload")) {
    listing.uploads.push_back({required_text(item, "Key", "Upload"), required_text(item, "UploadId", "Upload")});
  }
  listing.truncated = flag(result, "IsTruncated");
  listing.next_key_marker = result.child("NextKeyMarker").text().as_string();
  listing.next_upload_id_marker = result.child("NextUploadIdMarker").text().as_string();
  if (listing.truncated && listing.next_key_marker.empty() && listing.next_upload_id_marker.empty()) {
    throw RemoteStorageError("the store's multipart upload listing is truncated but gives no next marker");
  }
  return listing;
}

std::string parse_upload_id(const std::string& body) {
  const pugi::xml_document doc = parse(body, "a new multipart upload");
  const std::string id = required_text(root(doc, "InitiateMultipartUploadResult"), "UploadId", "InitiateMultipartUploadResult");
  if (id.empty()) throw RemoteStorageError("the store gave an empty UploadId for a new multipart upload");
  return id;
}

std::optional<ErrorBody> parse_error(const std::string& body) {
  pugi::xml_document doc;
  if (!doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8)) return std::nullopt;
  const pugi::xml_node error = doc.child("Error");
  if (!error) return std::nullopt;
  return ErrorBody{error.child("Code").text().as_string(), error.child("Message").text().as_string()};
}

std::string complete_upload_body(const std::vector<std::string>& etags) {
  pugi::xml_document doc;
  pugi::xml_node complete = doc.append_child("CompleteMultipartUpload");
  for (size_t i = 0; i < etags.size(); ++i) {
    pugi::xml_node part = complete.append_child("Part");
    part.append_child("PartNumber").text().set(static_cast<unsigned long long>(i + 1));
    part.append_child("ETag").text().set(etags[i].c_str());
  }
  std::ostringstream out;
  doc.save(out, "", pugi::format_raw | pugi::format_no_declaration);
  return out.str();
}

}  // namespace frugal::s3xml
