#pragma once
// Checkpoints in object storage, laid out as in a local CheckpointStore:
//   s3://bucket/prefix/ckpt-<step>/<file>   every file the local manifest lists
//   s3://bucket/prefix/ckpt-<step>/manifest.json   uploaded last: the checkpoint is committed
//   s3://bucket/prefix/latest               the name of the newest committed checkpoint
// Object stores have no rename, so the manifest plays the local rename's part: a checkpoint
// without one is an unfinished upload and is never read; a kill at any point leaves the
// committed checkpoints as they were. Deleting removes the manifest first, for the same reason.
// A download checks each file's size against the manifest; the caller checks the CRC-32s
// (CheckpointStore::verify) before the checkpoint is used.

#include <filesystem>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frugal/base/snapshot.hpp"
#include "frugal/base/retention.hpp"
#include "frugal/remote/s3_client.hpp"

namespace frugal {

struct RemoteCheckpoint {
  std::string name;  // ckpt-<step>
  int64_t step = 0;
};

class PrefixLease;

class RemoteCheckpoints {
 public:
  RemoteCheckpoints(S3Location location, S3ClientOptions options);
  S3Client& client() { return client_; }
  /// From now on every write (upload, commit, deletion) first checks that `lease` is still held:
  /// a run whose lease was taken over writes nothing more.
  void set_lease(std::shared_ptr<const PrefixLease> lease) { lease_ = std::move(lease); }
  /// s3://bucket/prefix/<name>
  std::string url_of(const std::string& name) const;

  /// Committed checkpoints (their manifest is stored), oldest first.
  std::vector<RemoteCheckpoint> committed();
  /// Uploads `files` of the local checkpoint folder `dir` as <dir's name>/<file>; `on_stage`
  /// hears "part" after each part of a multipart file and "<file>" after each file.
  void upload_files(const std::filesystem::path& dir, const std::vector<std::string>& files,
                    const std::function<void(const std::string&)>& on_stage = nullptr);
  /// Uploads the manifest, then `latest`: from here on the checkpoint exists remotely.
  void commit(const std::filesystem::path& dir, const std::function<void(const std::string&)>& on_stage = nullptr);
  /// Downloads the committed checkpoint `name` into the folder `target` (created; its files
  /// replaced). "" when every file arrived with its manifest's size, else why it cannot be used.
  std::string download(const std::string& name, const std::filesystem::path& target);
  /// Deletes a checkpoint: its manifest first, so that a kill midway leaves no committed part.
  void remove(const std::string& name);
  /// A kill's leftovers: objects of checkpoints that were never committed, and multipart
  /// uploads never completed. Only the run that writes under this prefix may call it.
  void remove_unfinished();
  /// Deletes the committed checkpoints that `rule` does not keep (ranked by their meta.json's
  /// metrics); never `newest`.
  void apply_retention(const RetentionRule& rule, const std::string& newest);

 private:
  /// The metrics a checkpoint was saved with (its meta.json), fetched once.
  const Metrics& metrics_of(const std::string& name);
  void check_writable() const;
  S3Client client_;
  std::shared_ptr<const PrefixLease> lease_;
  std::map<std::string, Metrics> metrics_;
};

/// ckpt-<step> of a checkpoint folder name, if it is one.
std::optional<int64_t> remote_checkpoint_step(const std::string& name);

}  // namespace frugal
