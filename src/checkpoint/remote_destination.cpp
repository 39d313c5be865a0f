#include "frugal/checkpoint/remote_destination.hpp"

#include <c10/util/StringUtil.h>

#include <cmath>

#include "checkpoint/rank_votes.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"
#include "frugal/remote/checkpoint_uploader.hpp"
#include "frugal/remote/prefix_lease.hpp"
#include "frugal/remote/remote_checkpoints.hpp"

namespace frugal {

namespace fs = std::filesystem;
using detail::max_across_ranks;

RemoteDestination::RemoteDestination(RemoteOptions options, RetentionRule retention)
    : options_(std::move(options)), retention_(std::move(retention)) {
  options_.validate();
  if (!options_.enabled()) throw OptionError("remote", "a remote checkpoint destination needs an s3://bucket/prefix URL");
}

RemoteDestination::~RemoteDestination() = default;

std::string RemoteDestination::location_of(const std::string& name) const {
  return store_ ? store_->url_of(name) : options_.url() + "/" + name;
}

void RemoteDestination::open(const TrainingRun& run, const CheckpointStore& local) {
  close();
  run_ = &run;
  local_ = &local;
  sharded_ = run.optimizer_sharding() != nullptr;
  newest_at_start_ = -1;
  last_submitted_ = -1;
  sharded_step_.reset();
  staged_.clear();
  last_commit_submitted_ = commit_awaited_ = -1;
  auto store = std::make_shared<RemoteCheckpoints>(S3Location::parse(options_.url(), "checkpoint.remote"), options_.client_options());
  try {
    store->client().check_access();
  } catch (const RemoteStorageError& e) {
    throw CheckpointError(c10::str("checkpoint.remote = ", options_.url(), " cannot be used: ", e.what()));
  }
  // Rank 0 writes the prefix: it takes the prefix's lease first (another live run there is
  // refused, naming it, before anything is touched), then tidies what a killed run left.
  std::string error;
  if (run.rank() == 0) {
    try {
      lease_ = PrefixLease::acquire(S3Location::parse(options_.url(), "checkpoint.remote"), options_.client_options(),
                                    {options_.lease_seconds(), run.options().run_dir()});
      store->set_lease(lease_);
      store->remove_unfinished();
      const auto committed = store->committed();
      if (!committed.empty()) newest_at_start_ = committed.back().step;
    } catch (const std::exception& e) {
      error = message_of(e);
    }
  }
  if (max_across_ranks(run, {error.empty() ? 0 : 1})[0] != 0) {
    throw CheckpointError(error.empty() ? std::string("rank 0 could not take checkpoint.remote's lease (see its log)") : error);
  }
  store_ = std::move(store);
  // Rank 0 uploads and commits; with a sharded optimizer every rank uploads its own shards.
  if (run.rank() == 0 || sharded_) {
    const fs::path staging = local.root() / ".uploads" / c10::str("rank-", run.rank());
    uploader_ = std::make_unique<CheckpointUploader>(store_, staging, retention_);
    if (observer_) uploader_->set_stage_observer(observer_);
  }
}

std::vector<std::string> RemoteDestination::fetch_newer() {
  std::vector<std::string> skipped;
  std::string error;
  if (run_->rank() == 0) {
    try {
      skipped = fetch_newer_on_rank0();
    } catch (const std::exception& e) {
      error = message_of(e);
    }
  }
  // Every rank learns the outcome (one collective), so that none waits alone for the others.
  const auto outcome = max_across_ranks(*run_, {error.empty() ? 0 : 1, skipped.empty() ? 0 : 1});
  if (outcome[0] != 0) throw CheckpointError(error.empty() ? std::string("rank 0 could not fetch the remote checkpoint (see its log)") : error);
  if (outcome[1] != 0 && skipped.empty()) skipped.push_back("a remote checkpoint failed its check (see rank 0's log)");
  return skipped;
}

std::vector<std::string> RemoteDestination::fetch_newer_on_rank0() {
  std::vector<std::string> skipped;
  int64_t local_newest = -1;
  if (const auto found = local_->find_latest_valid()) local_newest = found->info.step;
  std::vector<RemoteCheckpoint> committed;
  try {
    committed = store_->committed();
  } catch (const std::exception& e) {
    throw CheckpointError(c10::str("cannot list the remote checkpoints in ", options_.url(), ": ", message_of(e)));
  }
  for (auto it = committed.rbegin(); it != committed.rend() && it->step > local_newest; ++it) {
    const fs::path target = local_->root() / (it->name + ".tmp");
    std::error_code ignored;
    fs::remove_all(target, ignored);
    std::string reason;
    try {
      reason = store_->download(it->name, target);
      if (reason.empty()) reason = local_->verify(target);
    } catch (const std::exception& e) {
      reason = message_of(e);
    }
    if (!reason.empty()) {
      fs::remove_all(target, ignored);
      const std::string where = store_->url_of(it->name);
      log::warn("remote checkpoint skipped: " + where + ": " + reason);
      skipped.push_back(where + ": " + reason);
      continue;
    }
    const fs::path final_dir = local_->adopt(target, it->name);
    log::info("downloaded the remote checkpoint " + store_->url_of(it->name) + " to " + final_dir.string());
    break;
  }
  return skipped;
}

void RemoteDestination::resumed_from(const CheckpointInfo& info) {
  if (uploader_ && run_->rank() == 0 && !local_->sharding_of(info) && info.step > newest_at_start_) published(info);
}

void RemoteDestination::published(const CheckpointInfo& info) {
  if (!uploader_) return;
  uploader_->submit(info.dir, info.step);
  last_submitted_ = info.step;
}

void RemoteDestination::shard_written(int64_t step, const fs::path& folder, const std::vector<FileRecord>& files) {
  staged_.clear();
  if (!uploader_) return;
  // Each rank's files go to the store from links taken now: rank 0 renames the folder next.
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(f.name);
  try {
    uploader_->stage(folder, step, names);
    staged_ = std::move(names);
  } catch (const std::exception& e) {
    log::warn(c10::str("the shard files of step ", step, " cannot be staged for upload: ", e.what(), " (they stay local)"));
  }
}

void RemoteDestination::shards_published(int64_t step, const CheckpointInfo* info) {
  if (!uploader_) return;
  std::vector<std::string> files = std::move(staged_);
  staged_.clear();
  if (info != nullptr && !files.empty()) {  // rank 0 also sends meta.json, and keeps the manifest for the commit
    uploader_->stage(info->dir, step, {"meta.json", "manifest.json"});
    files.push_back("meta.json");
  }
  // A rank whose files could not be staged submits nothing: the commit then finds its upload
  // missing on that rank, and the checkpoint stays local.
  if (!files.empty()) uploader_->submit(step, std::move(files), /*commit=*/false);
  sharded_step_ = step;
}

std::string RemoteDestination::advance_sharded_commit(bool block, Clock::time_point deadline) {
  if (!sharded_step_ || !uploader_) return "";  // every rank of a sharded run has an uploader until close()
  const int64_t step = *sharded_step_;
  std::string mine;
  if (block) {
    mine = uploader_->wait_uploaded(step, deadline);
  } else {
    const auto progress = uploader_->upload_progress(step);
    // Some rank still uploading: ask again at the next step.
    if (run_->any_rank(progress == CheckpointUploader::Progress::pending)) return "";
    if (progress == CheckpointUploader::Progress::failed) mine = "its upload failed or a newer checkpoint replaced it";
  }
  sharded_step_.reset();
  if (run_->any_rank(!mine.empty())) {
    const std::string why = mine.empty() ? "another rank could not upload its shard files (see its log)" : mine;
    log::warn(c10::str("the sharded checkpoint of step ", step, " is not committed remotely: ", why));
    return why;
  }
  if (run_->rank() == 0) {  // every rank's files are in the store: the manifest commits them
    uploader_->submit(step, {}, /*commit=*/true);
    last_commit_submitted_ = step;
  }
  return "";
}

void RemoteDestination::preempted(int64_t step) {
  if (uploader_) uploader_->cancel_older(step);
}

std::string RemoteDestination::wait_committed(Clock::time_point since) {
  if (run_ == nullptr) return "";
  const auto deadline = since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.deadline_seconds()));
  std::string why = advance_sharded_commit(/*block=*/true, deadline);
  const int64_t step = sharded_ ? last_commit_submitted_ : last_submitted_.load();
  if (why.empty() && run_->rank() == 0 && uploader_ && step >= 0 && step > commit_awaited_) {
    log::info(c10::str("waiting for the checkpoint of step ", step, " to be committed to ", options_.url(), " (at most ",
                       options_.deadline_seconds(), " s from ", sharded_ ? "now" : "the request", ")"));
    why = uploader_->wait_committed(step, deadline);
    if (why.empty()) commit_awaited_ = step;
  }
  const bool failed = run_->any_rank(!why.empty());
  if (failed && why.empty()) why = "rank 0 could not commit it (see its log)";
  return why;
}

void RemoteDestination::close() {
  uploader_.reset();
  sharded_step_.reset();
  if (store_) store_->set_lease(nullptr);
  lease_.reset();  // released
}

}  // namespace frugal
