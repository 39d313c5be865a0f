#include "frugal/remote/remote_checkpoints.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "base/checkpoint_names.hpp"
#include "frugal/log.hpp"
#include "frugal/remote/prefix_lease.hpp"

namespace frugal {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr const char* kManifest = "manifest.json";

}  // namespace

std::optional<int64_t> remote_checkpoint_step(const std::string& name) { return detail::checkpoint_folder_step(name); }

RemoteCheckpoints::RemoteCheckpoints(S3Location location, S3ClientOptions options) : client_(std::move(location), std::move(options)) {}

std::string RemoteCheckpoints::url_of(const std::string& name) const { return client_.location().url() + "/" + name; }

void RemoteCheckpoints::check_writable() const {
  if (lease_) lease_->check_held();
}

std::vector<RemoteCheckpoint> RemoteCheckpoints::committed() {
  const std::string root = client_.location().key("");
  std::vector<RemoteCheckpoint> found;
  for (const S3Object& o : client_.list(root)) {
    const std::string rest = o.key.substr(root.size());
    const auto slash = rest.find('/');
    if (slash == std::string::npos || rest.substr(slash + 1) != kManifest) continue;
    const std::string name = rest.substr(0, slash);
    if (const auto step = remote_checkpoint_step(name)) found.push_back({name, *step});
  }
  std::sort(found.begin(), found.end(), [](const RemoteCheckpoint& a, const RemoteCheckpoint& b) { return a.step < b.step; });
  return found;
}

void RemoteCheckpoints::upload_files(const fs::path& dir, const std::vector<std::string>& files,
                                     const std::function<void(const std::string&)>& on_stage) {
  const std::string name = dir.filename().string();
  for (const std::string& file : files) {
    check_writable();
    client_.put_file(client_.location().key(name + "/" + file), dir / file, [&](int) {
      if (on_stage) on_stage("part");
    });
    if (on_stage) on_stage(file);
  }
}

void RemoteCheckpoints::commit(const fs::path& dir, const std::function<void(const std::string&)>& on_stage) {
  check_writable();
  const std::string name = dir.filename().string();
  client_.put_file(client_.location().key(name + "/" + kManifest), dir / kManifest);
  if (on_stage) on_stage(kManifest);
  client_.put_bytes(client_.location().key("latest"), name);
  if (on_stage) on_stage("latest");
}

std::string RemoteCheckpoints::download(const std::string& name, const fs::path& target) {
  const std::string base = client_.location().key(name + "/");
  const auto manifest_bytes = client_.get_bytes_if_exists(base + kManifest);
  if (!manifest_bytes) {
    return client_.list(base).empty() ? std::string("there is no such checkpoint")
                                      : std::string("it has no manifest.json: never committed (an upload that did not finish)");
  }
  std::vector<std::pair<std::string, uint64_t>> files;
  try {
    const json manifest = json::parse(*manifest_bytes);
    for (const auto& f : manifest.at("files")) {
      const std::string file = f.at("name").get<std::string>();
      if (!detail::plain_file_name(file) || file == kManifest) return "its manifest lists '" + file + "', which is not a plain file name";
      files.emplace_back(file, f.at("size").get<uint64_t>());
    }
  } catch (const std::exception& e) {
    return std::string("unreadable manifest.json: ") + e.what();
  }
  fs::create_directories(target);
  for (const auto& [file, size] : files) {
    uint64_t got = 0;
    try {
      got = client_.get_file(base + file, target / file);
    } catch (const RemoteStorageError& e) {
      if (e.http_status() == 404) return file + " is missing from the remote checkpoint";
      throw;
    }
    if (got != size) return file + " is " + std::to_string(got) + " bytes but the manifest says " + std::to_string(size) + " (truncated?)";
  }
  {
    std::ofstream out(target / kManifest, std::ios::binary);
    out.write(manifest_bytes->data(), static_cast<std::streamsize>(manifest_bytes->size()));
    if (!out) throw RemoteStorageError("cannot write " + (target / kManifest).string());
  }
  return "";
}

void RemoteCheckpoints::remove(const std::string& name) {
  check_writable();
  const std::string base = client_.location().key(name + "/");
  client_.remove(base + kManifest);
  for (const S3Object& o : client_.list(base)) client_.remove(o.key);
  metrics_.erase(name);
}

void RemoteCheckpoints::remove_unfinished() {
  check_writable();
  const std::string root = client_.location().key("");
  std::set<std::string> committed_names;
  std::map<std::string, std::vector<std::string>> objects_of;
  for (const S3Object& o : client_.list(root)) {
    const std::string rest = o.key.substr(root.size());
    const auto slash = rest.find('/');
    if (slash == std::string::npos) continue;
    const std::string name = rest.substr(0, slash);
    if (!remote_checkpoint_step(name)) continue;  // not ours
    if (rest.substr(slash + 1) == kManifest) committed_names.insert(name);
    objects_of[name].push_back(o.key);
  }
  for (const auto& [name, keys] : objects_of) {
    if (committed_names.count(name)) continue;
    log::info("removing the unfinished remote checkpoint " + url_of(name) + " (" + std::to_string(keys.size()) + " object(s), never committed)");
    for (const auto& key : keys) client_.remove(key);
  }
  if (const int aborted = client_.abort_unfinished_uploads(root); aborted > 0) {
    log::info("aborted " + std::to_string(aborted) + " unfinished multipart upload(s) under " + client_.location().url());
  }
}

const Metrics& RemoteCheckpoints::metrics_of(const std::string& name) {
  auto it = metrics_.find(name);
  if (it != metrics_.end()) return it->second;
  Metrics metrics;
  try {
    const auto bytes = client_.get_bytes_if_exists(client_.location().key(name + "/meta.json"));
    if (bytes) metrics = json::parse(*bytes).at("state").at("last_validation").get<Metrics>();
  } catch (const std::exception& e) {
    log::warn("cannot read the metrics of " + url_of(name) + ": " + e.what() + " (not ranked among the best)");
  }
  return metrics_.emplace(name, std::move(metrics)).first->second;
}

void RemoteCheckpoints::apply_retention(const RetentionRule& rule, const std::string& newest) {
  const auto all = committed();
  std::vector<RetentionCandidate> candidates;
  for (const auto& c : all) {
    RetentionCandidate candidate{c.name, std::nullopt};
    if (rule.keep_best > 0) {  // meta.json is fetched only when it ranks
      const Metrics& m = metrics_of(c.name);
      if (const auto it = m.find(rule.monitor); it != m.end()) candidate.score = it->second;
    }
    candidates.push_back(std::move(candidate));
  }
  const Retained retained = retain(candidates, rule);
  for (const auto& c : all) {
    if (c.name == newest || retained.keeps(c.name)) continue;
    remove(c.name);
    log::debug("remote checkpoint removed: " + url_of(c.name));
  }
}

}  // namespace frugal
