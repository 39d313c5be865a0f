#include "frugal/checkpoint/local_destination.hpp"

#include <chrono>
#include <set>

#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;

std::string LocalDestination::where() const { return store_ ? store_->root().string() : std::string(); }

std::string LocalDestination::location_of(const std::string& name) const { return (fs::path(where()) / name).string(); }

void LocalDestination::open(const TrainingRun& /*run*/, const CheckpointStore& local) { store_ = &local; }

void LocalDestination::apply_retention() const {
  if (store_) apply_retention(*store_);
}

void LocalDestination::apply_retention(const CheckpointStore& store) const {
  const auto all = store.list();
  if (all.empty()) return;
  const auto latest = store.latest();
  std::vector<RetentionCandidate> candidates;
  for (const auto& c : all) {
    RetentionCandidate candidate{c.dir.filename().string(), std::nullopt};
    if (const auto it = c.metrics.find(retention_.rule.monitor); it != c.metrics.end()) candidate.score = it->second;
    candidates.push_back(std::move(candidate));
  }
  const Retained retained = retain(candidates, retention_.rule);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& c : all) {
    const std::string name = c.dir.filename().string();
    if (retained.best.count(name)) continue;  // the best stay in place, whatever their age
    const bool is_latest = latest && *latest == c.dir;
    const bool stale = retention_.archive_after_days > 0 && c.unix_time > 0 &&
                       now - c.unix_time > retention_.archive_after_days * 86400.0 && !is_latest;
    if ((retained.newest.count(name) || is_latest) && !stale) continue;
    if (!retention_.archive_dir.empty()) {
      const fs::path cold(retention_.archive_dir);
      fs::create_directories(cold);
      fs::path target = cold / c.dir.filename();
      if (fs::exists(target)) fs::remove_all(target);
      std::error_code ec;
      fs::rename(c.dir, target, ec);
      if (ec) {  // another file system: copy aside, rename into place, then remove
        const fs::path partial = target.string() + ".partial";
        fs::remove_all(partial);
        fs::copy(c.dir, partial, fs::copy_options::recursive);
        fs::rename(partial, target);
        store.remove(c.dir);
      }
      log::info("checkpoint archived: " + c.dir.string() + " -> " + target.string());
    } else {
      store.remove(c.dir);
      log::debug("checkpoint removed: " + c.dir.string());
    }
  }
}

}  // namespace frugal
