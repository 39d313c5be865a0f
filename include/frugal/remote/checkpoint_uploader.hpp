#pragma once
// Sends local checkpoints to object storage on a background thread, so that training never
// waits for the network. A submitted checkpoint's files are hard-linked into a staging folder
// first: local retention may delete the checkpoint meanwhile. The queue is bounded: one upload
// runs and one waits; a newer checkpoint replaces the waiting one (said in the log) rather than
// stall training or queue without limit. After each commit, remote retention runs.
//
//   CheckpointUploader uploader(remote, run_dir / "checkpoints" / ".uploads", retention);
//   uploader.submit(info.dir, info.step);                  // returns at once
//   std::string why = uploader.wait_committed(step, deadline);  // at the end, or on SIGTERM

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "frugal/remote/remote_checkpoints.hpp"

namespace frugal {

class CheckpointUploader {
 public:
  using Clock = std::chrono::steady_clock;
  CheckpointUploader(std::shared_ptr<RemoteCheckpoints> remote, std::filesystem::path staging, RetentionRule retention);
  /// Stops at once: an upload in flight is abandoned (it stays uncommitted, removed at the next start).
  ~CheckpointUploader();

  /// Queues the committed local checkpoint folder `dir` (every file its manifest lists, then the
  /// manifest and `latest`).
  void submit(const std::filesystem::path& dir, int64_t step);
  /// Links `files` of the folder `dir` (a checkpoint of `step`, published or not) into the
  /// staging folder, where a later submit finds them. Sharded checkpoints: each rank stages its
  /// own files before rank 0 renames the folder.
  void stage(const std::filesystem::path& dir, int64_t step, const std::vector<std::string>& files);
  /// Queues the upload of staged `files` of `step`, then with `commit` its staged manifest and `latest`.
  void submit(int64_t step, std::vector<std::string> files, bool commit);
  /// Waits until the checkpoint of `step` is committed (`committed`) or its files are uploaded,
  /// uploading again after a failure, until `deadline`: "" once done, else why not.
  std::string wait_committed(int64_t step, Clock::time_point deadline) { return wait_for(step, deadline, true); }
  std::string wait_uploaded(int64_t step, Clock::time_point deadline) { return wait_for(step, deadline, false); }
  /// A pre-emption: only checkpoints of `step` and later matter. An older upload in flight stops
  /// at once (its multipart uploads aborted; never committed, its objects removed at the next
  /// start) and an older one waiting is dropped, so that the newest goes up alone.
  void cancel_older(int64_t step);
  enum class Progress { done, pending, failed };
  /// Where the upload of `step`'s files stands (failed: it failed, or a newer one replaced it).
  Progress upload_progress(int64_t step) const;
  /// Told each stage ("part", each file's name, "manifest.json", "latest") with the step, on the
  /// upload thread: crash tests stop there.
  void set_stage_observer(std::function<void(const std::string& stage, int64_t step)> observer);

 private:
  struct Job {
    int64_t step = 0;
    std::vector<std::string> files;  // staged files to upload
    bool commit = true;              // then the staged manifest and `latest`
  };
  void run();
  void upload(const Job& job);
  std::string wait_for(int64_t step, Clock::time_point deadline, bool committed);
  std::filesystem::path staged(int64_t step) const;

  std::shared_ptr<RemoteCheckpoints> remote_;
  std::filesystem::path staging_;
  RetentionRule retention_;
  std::function<void(const std::string&, int64_t)> observer_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Job> waiting_;
  std::optional<Job> running_;
  std::optional<Job> failed_;           // the newest that failed, kept to retry
  std::string failure_;                 // why it failed
  Clock::time_point retry_at_{};        // when wait_committed may try it again
  std::optional<int64_t> committed_;
  std::optional<int64_t> uploaded_;     // the newest step whose files went up
  bool stopping_ = false;
  std::optional<int64_t> cancelled_;    // the step whose running upload cancel_older stopped
  std::thread thread_;
};

}  // namespace frugal
