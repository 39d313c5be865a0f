#include "frugal/remote/checkpoint_uploader.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/checkpoint_names.hpp"
#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;

namespace {
constexpr const char* kManifest = "manifest.json";

// The files a local checkpoint's manifest lists, in its order.
std::vector<std::string> listed_files(const fs::path& dir) {
  std::ifstream in(dir / kManifest, std::ios::binary);
  if (!in) throw RemoteStorageError("cannot upload " + dir.string() + ": it has no readable manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  std::vector<std::string> files;
  for (const auto& f : manifest.at("files")) files.push_back(f.at("name").get<std::string>());
  return files;
}

std::string name_of(int64_t step) { return detail::checkpoint_folder_name(step); }
}  // namespace

CheckpointUploader::CheckpointUploader(std::shared_ptr<RemoteCheckpoints> remote, fs::path staging, RetentionRule retention)
    : remote_(std::move(remote)), staging_(std::move(staging)), retention_(std::move(retention)) {
  std::error_code ignored;
  fs::remove_all(staging_, ignored);  // an earlier process's links: nothing waits for them
  fs::create_directories(staging_);
  thread_ = std::thread([this] { run(); });
}

CheckpointUploader::~CheckpointUploader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  remote_->client().set_deadline(Clock::now());  // a request in flight gives up now
  changed_.notify_all();
  thread_.join();
  std::error_code ignored;
  fs::remove_all(staging_, ignored);
}

void CheckpointUploader::set_stage_observer(std::function<void(const std::string&, int64_t)> observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = std::move(observer);
}

fs::path CheckpointUploader::staged(int64_t step) const { return staging_ / name_of(step); }

void CheckpointUploader::stage(const fs::path& dir, int64_t step, const std::vector<std::string>& files) {
  const fs::path target = staged(step);
  fs::create_directories(target);
  for (const auto& f : files) {
    std::error_code ec;
    fs::remove(target / f, ec);
    fs::create_hard_link(dir / f, target / f, ec);
    if (ec) fs::copy_file(dir / f, target / f, fs::copy_options::overwrite_existing);  // another file system
  }
}

void CheckpointUploader::submit(const fs::path& dir, int64_t step) {
  std::error_code ignored;
  fs::remove_all(staged(step), ignored);  // an earlier attempt at this step (a rollback saves it again)
  auto files = listed_files(dir);
  auto with_manifest = files;
  with_manifest.push_back(kManifest);
  stage(dir, step, with_manifest);
  submit(step, std::move(files), /*commit=*/true);
}

void CheckpointUploader::submit(int64_t step, std::vector<std::string> files, bool commit) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (waiting_ && waiting_->step != step) {
    log::warn("remote uploads fall behind: the checkpoint of step " + std::to_string(waiting_->step) +
              " is not uploaded (the one of step " + std::to_string(step) + " is newer); consider saving less often");
    std::error_code ignored;
    if (!(running_ && running_->step == waiting_->step)) fs::remove_all(staged(waiting_->step), ignored);
  }
  waiting_ = Job{step, std::move(files), commit};
  changed_.notify_all();
}

void CheckpointUploader::cancel_older(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::error_code ignored;
  if (waiting_ && waiting_->step < step) {
    fs::remove_all(staged(waiting_->step), ignored);
    waiting_.reset();
  }
  if (failed_ && failed_->step < step) failed_.reset();  // not tried again
  if (running_ && running_->step < step && cancelled_ != running_->step) {
    cancelled_ = running_->step;
    log::info("pre-emption: the upload of the older checkpoint of step " + std::to_string(running_->step) +
              " stops, so that the one of step " + std::to_string(step) + " goes up alone");
    remote_->client().cancel_requests_in_flight();
  }
  changed_.notify_all();
}

void CheckpointUploader::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || waiting_.has_value(); });
      if (stopping_) return;
      job = *waiting_;
      waiting_.reset();
      running_ = job;
    }
    std::string error;
    try {
      upload(job);
    } catch (const std::exception& e) {
      error = message_of(e);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    running_.reset();
    if (stopping_) return;
    std::error_code ignored;
    if (cancelled_ == job.step) {  // given way to a newer checkpoint: not a failure, not retried
      cancelled_.reset();
      if (!(waiting_ && waiting_->step == job.step)) fs::remove_all(staged(job.step), ignored);
      changed_.notify_all();
      continue;
    }
    if (error.empty()) {
      uploaded_ = std::max(uploaded_.value_or(job.step), job.step);
      // The links go once used: all of them after a commit; the uploaded files otherwise (a
      // commit of this step may follow, which needs only the staged manifest).
      if (job.commit) {
        committed_ = std::max(committed_.value_or(job.step), job.step);
        if (!(waiting_ && waiting_->step == job.step)) fs::remove_all(staged(job.step), ignored);
      } else {
        for (const auto& f : job.files) fs::remove(staged(job.step) / f, ignored);
      }
      if (failed_ && failed_->step <= job.step) failed_.reset();
    } else {
      log::error("uploading the checkpoint of step " + std::to_string(job.step) + " to " + remote_->url_of(name_of(job.step)) +
                 " failed: " + error + " (it stays local; the next checkpoint is uploaded as usual)");
      if (failed_ && failed_->step != job.step && !(waiting_ && waiting_->step == failed_->step)) {
        fs::remove_all(staged(failed_->step), ignored);  // only the newest failure is tried again
      }
      failed_ = job;
      failure_ = error;
    }
    changed_.notify_all();
  }
}

void CheckpointUploader::upload(const Job& job) {
  std::function<void(const std::string&, int64_t)> observer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    observer = observer_;
  }
  auto stop_if_cancelled = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_ == job.step) throw RemoteCancelled("the upload of step " + std::to_string(job.step) + " was cancelled");
  };
  auto on_stage = [&](const std::string& stage) {
    if (observer) observer(stage, job.step);
    stop_if_cancelled();  // between parts and files: a cancelled upload goes no further
  };
  const auto started = Clock::now();
  const fs::path dir = staged(job.step);
  remote_->upload_files(dir, job.files, on_stage);
  if (!job.commit) return;
  stop_if_cancelled();
  remote_->commit(dir, on_stage);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  log::info("checkpoint committed remotely: " + remote_->url_of(name_of(job.step)) + " (" + std::to_string(seconds).substr(0, 5) + " s)");
  // Only after a newer checkpoint is committed may an older one go.
  try {
    remote_->apply_retention(retention_, name_of(job.step));
  } catch (const std::exception& e) {
    log::warn(std::string("remote retention failed (retried after the next commit): ") + message_of(e));
  }
}

CheckpointUploader::Progress CheckpointUploader::upload_progress(int64_t step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (uploaded_ && *uploaded_ >= step) return Progress::done;
  if ((running_ && running_->step == step) || (waiting_ && waiting_->step == step)) return Progress::pending;
  return Progress::failed;
}

std::string CheckpointUploader::wait_for(int64_t step, Clock::time_point deadline, bool committed) {
  remote_->client().set_deadline(deadline);
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [&] {
    const auto& reached = committed ? committed_ : uploaded_;
    return reached && *reached >= step;
  };
  std::string why;
  while (!done()) {
    const bool pending = (waiting_ && waiting_->step >= step) || (running_ && running_->step >= step);
    auto wake = deadline;
    if (!pending) {
      if (!(failed_ && failed_->step >= step)) {
        why = "the checkpoint of step " + std::to_string(step) + " was not submitted for upload (a newer one replaced it)";
        break;
      }
      const auto now = Clock::now();  // try it again while time is left, every 2 s at most
      if (now >= retry_at_) {
        waiting_ = failed_;
        retry_at_ = now + std::chrono::seconds(2);
        changed_.notify_all();
      } else {
        wake = std::min(deadline, retry_at_);
      }
    }
    changed_.wait_until(lock, wake);
    if (Clock::now() >= deadline && !done()) {
      why = failure_.empty() ? "the upload did not finish in time" : "the upload did not finish in time; last error: " + failure_;
      break;
    }
  }
  lock.unlock();
  remote_->client().set_deadline(std::nullopt);
  return why;
}

}  // namespace frugal
