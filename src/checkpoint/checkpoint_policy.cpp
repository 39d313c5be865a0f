#include "frugal/checkpoint/checkpoint_policy.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <set>

#include "frugal/checkpoint/preemption.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/distributed/communicator.hpp"
#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;

void CheckpointOptions::validate() const {
  if (every_n_steps() < 0) throw OptionError("every_n_steps", c10::str("every_n_steps must be >= 0, got ", every_n_steps()));
  if (every_n_minutes() < 0) {
    throw OptionError("every_n_minutes", c10::str("every_n_minutes must be >= 0, got ", every_n_minutes()));
  }
  if (keep_last() < 0) throw OptionError("keep_last", c10::str("keep_last must be >= 0, got ", keep_last()));
  if (keep_best() < 0) throw OptionError("keep_best", c10::str("keep_best must be >= 0, got ", keep_best()));
  if (monitor_mode() != "min" && monitor_mode() != "max") {
    throw OptionError("monitor_mode", "monitor_mode must be min or max, got '" + monitor_mode() + "'");
  }
  if (archive_after_days() < 0) {
    throw OptionError("archive_after_days", c10::str("archive_after_days must be >= 0, got ", archive_after_days()));
  }
}

CheckpointPolicy::CheckpointPolicy(CheckpointOptions options, std::string config_toml)
    : options_(std::move(options)), config_toml_(std::move(config_toml)), store_(options_.dir()) {
  options_.validate();
}

CheckpointPolicy::~CheckpointPolicy() {
  // A fit that threw leaves a write in flight: let it finish, so the directory stays consistent.
  if (pending_.valid()) {
    try {
      pending_.get();
    } catch (const std::exception& e) {
      log::error(e.what());
    }
  }
}

namespace {
fs::path checkpoint_dir(const CheckpointOptions& options, const Trainer& trainer) {
  if (!options.dir().empty()) return options.dir();
  if (trainer.options().run_dir().empty()) {
    throw OptionError("dir", "checkpoint.dir is empty and trainer.run_dir is empty: nowhere to write checkpoints");
  }
  return fs::path(trainer.options().run_dir()) / "checkpoints";
}
}  // namespace

std::shared_ptr<const TrainingSnapshot> CheckpointPolicy::resume_from(const Trainer& trainer) {
  store_ = CheckpointStore(checkpoint_dir(options_, trainer));
  if (!options_.resume()) return nullptr;
  // Every rank resumes from the same checkpoint (a shared file system); only the writer tidies.
  if (trainer.rank() == 0) store_.remove_unfinished();
  auto found = store_.find_latest_valid();
  if (!found) return nullptr;
  for (const auto& s : found->skipped) log::warn("checkpoint skipped: " + s);
  log::info(c10::str("resuming from ", found->info.dir.string()));
  last_saved_step_ = found->info.step;
  return std::make_shared<TrainingSnapshot>(store_.read(found->info));
}

void CheckpointPolicy::on_fit_begin(const Trainer& trainer) {
  trainer_ = &trainer;
  store_ = CheckpointStore(checkpoint_dir(options_, trainer));
  if (options_.on_signal()) preemption::install();
  last_save_time_ = std::chrono::steady_clock::now();
}

void CheckpointPolicy::surface_errors() {
  if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) pending_.get();
}

void CheckpointPolicy::wait() {
  if (pending_.valid()) pending_.get();
}

void CheckpointPolicy::save(const TrainerState& state) {
  if (trainer_ == nullptr) throw TrainingError("CheckpointPolicy::save before the fit began");
  if (state.step == last_saved_step_) return;
  last_saved_step_ = state.step;
  if (trainer_->rank() != 0) return;  // replicas hold the same state: rank 0 writes it
  wait();  // one write at a time; its error, if any, surfaces here
  auto snapshot = std::make_shared<TrainingSnapshot>(trainer_->snapshot());
  CheckpointWriteOptions write_options;
  write_options.weights_dtype = options_.weights_dtype();
  write_options.config_toml = config_toml_;
  if (stage_observer_) {
    write_options.on_stage = [observer = stage_observer_, step = state.step](const std::string& stage) { observer(stage, step); };
  }
  last_save_time_ = std::chrono::steady_clock::now();
  auto job = [this, snapshot, write_options] {
    CheckpointInfo info = store_.write(*snapshot, write_options);
    apply_retention();
    log::info(c10::str("checkpoint written: ", info.dir.string()));
    return info;
  };
  if (options_.async()) {
    pending_ = std::async(std::launch::async, job);
  } else {
    job();
  }
}

void CheckpointPolicy::on_step_end(StepContext& ctx) {
  surface_errors();
  if (!ctx.boundary()) return;
  const TrainerState& s = ctx.state();
  const bool by_steps = options_.every_n_steps() > 0 && s.step % options_.every_n_steps() == 0;
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_time_).count() / 60.0;
  bool by_time = options_.every_n_minutes() > 0 && minutes >= options_.every_n_minutes();
  // Clocks differ between ranks: rank 0's decides, so that every rank keeps the same cadence.
  if (options_.every_n_minutes() > 0 && trainer_->world_size() > 1) by_time = trainer_->communicator().any(by_time && trainer_->rank() == 0);
  if (by_steps || by_time) save(s);
}

void CheckpointPolicy::on_epoch_end(const TrainerState& state) {
  surface_errors();
  if (options_.every_epoch()) save(state);
}

std::optional<std::string> CheckpointPolicy::should_stop(const TrainerState& state) {
  if (!options_.on_signal() || trainer_ == nullptr) return std::nullopt;
  const int signal = preemption::requested();
  // A signal may reach the ranks at different steps: when any rank has one, all save and stop.
  const bool any_signal = trainer_->world_size() > 1 ? trainer_->communicator().any(signal != 0) : signal != 0;
  if (!any_signal) return std::nullopt;
  save(state);
  wait();  // the process may be killed soon after: the checkpoint must be on disk first
  preemption::clear();
  const char* by = signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "a signal to another rank";
  return c10::str("pre-empted by ", by, ": checkpoint of step ", state.step,
                  " written, the next start resumes from it");
}

void CheckpointPolicy::on_fit_end(const Trainer& trainer) {
  if (options_.at_end()) save(trainer.state());
  wait();
}

void CheckpointPolicy::apply_retention() const {
  auto all = store_.list();
  if (all.empty()) return;
  const auto latest = store_.latest();
  std::set<fs::path> keep;
  if (latest) keep.insert(*latest);
  const size_t n = all.size();
  if (options_.keep_last() == 0) {
    for (const auto& c : all) keep.insert(c.dir);
  } else {
    for (size_t i = n - std::min<size_t>(n, static_cast<size_t>(options_.keep_last())); i < n; ++i) keep.insert(all[i].dir);
  }
  std::set<fs::path> best;
  if (options_.keep_best() > 0) {
    std::vector<const CheckpointInfo*> scored;
    for (const auto& c : all) {
      auto it = c.metrics.find(options_.monitor());
      if (it != c.metrics.end() && std::isfinite(it->second)) scored.push_back(&c);
    }
    const bool min = options_.monitor_mode() == "min";
    std::stable_sort(scored.begin(), scored.end(), [&](const CheckpointInfo* a, const CheckpointInfo* b) {
      const double x = a->metrics.at(options_.monitor()), y = b->metrics.at(options_.monitor());
      return min ? x < y : x > y;
    });
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(options_.keep_best()); ++i) best.insert(scored[i]->dir);
  }
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& c : all) {
    if (best.count(c.dir)) continue;  // the best stay in place, whatever their age
    const bool stale = options_.archive_after_days() > 0 && c.unix_time > 0 &&
                       now - c.unix_time > options_.archive_after_days() * 86400.0 && !(latest && *latest == c.dir);
    if (keep.count(c.dir) && !stale) continue;
    if (!options_.archive_dir().empty()) {
      const fs::path cold(options_.archive_dir());
      fs::create_directories(cold);
      fs::path target = cold / c.dir.filename();
      if (fs::exists(target)) fs::remove_all(target);
      std::error_code ec;
      fs::rename(c.dir, target, ec);
      if (ec) {  // another file system: copy, then remove
        fs::copy(c.dir, target, fs::copy_options::recursive);
        fs::remove_all(c.dir);
      }
      log::info("checkpoint archived: " + c.dir.string() + " -> " + target.string());
    } else {
      fs::remove_all(c.dir);
      log::debug("checkpoint removed: " + c.dir.string());
    }
  }
}

}  // namespace frugal
