#include "checkpoint/checkpoint_writes.hpp"

#include <c10/util/StringUtil.h>

#include <future>
#include <optional>

#include "base/checkpoint_names.hpp"
#include "base/finite_weights.hpp"
#include "checkpoint/rank_votes.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace {

using detail::max_across_ranks;

void apply_retention(const WriteContext& c) {
  for (const auto& d : c.destinations) d->apply_retention();
}

/// NonFiniteError, before anything is written, when a checked weight holds an inf or a NaN.
void refuse_nonfinite(const TrainingRun& run, const TrainingSnapshot& snapshot, const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& key : keys) {
    if (const auto it = snapshot.tensors.find(key); it != snapshot.tensors.end()) named.emplace_back(key.substr(6), it->second);
  }
  const auto bad = detail::first_nonfinite(named);
  if (!bad) return;
  const int64_t step = snapshot.state.step;
  throw NonFiniteError(detail::nonfinite_stop_message(c10::str("non-finite weights at step ", step, " (parameter ", *bad, ")"),
                                                     c10::str("the checkpoint of step ", step, ", not written"), run.last_checkpoint_text()));
}

class UnshardedWrites : public CheckpointWrites {
 public:
  explicit UnshardedWrites(WriteContext context) : c_(std::move(context)) {}

  void save(const TrainerState& state) override {
    if (c_.run->rank() != 0) return;  // replicas hold the same state: rank 0 writes it
    wait();                           // one write at a time; its error, if any, surfaces here
    // Staged: the weights and the optimizer's state are copied on the writer thread, beside the
    // next step's forward and backward (the run waits for the copy before it changes them).
    auto staged = c_.run->staged_snapshot();
    auto job = [c = c_, staged, options = c_.write_options(state.step), weights = checked_weights()] {
      const std::shared_ptr<const TrainingSnapshot> snapshot = staged->finish();
      refuse_nonfinite(*c.run, *snapshot, weights);
      CheckpointInfo info = c.store->write(*snapshot, options);
      for (const auto& d : c.destinations) d->published(info);  // before retention may delete the folder
      apply_retention(c);
      log::info(c10::str("checkpoint written: ", info.dir.string()));
      return info;
    };
    if (c_.async) {
      pending_ = std::async(std::launch::async, job);
    } else {
      job();
    }
  }

  // One process: no other rank must stop with it, so the writer checks its own copy.
  bool checks_weights() const override { return c_.run->world_size() == 1; }

  void surface_errors() override {
    if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) pending_.get();
  }
  void progress() override {}
  void wait() override {
    if (pending_.valid()) pending_.get();
  }
  void drain() noexcept override {
    if (!pending_.valid()) return;
    try {
      pending_.get();
    } catch (const std::exception& e) {
      log::error(e.what());
    }
  }

 private:
  /// The snapshot's keys of the weights the writer checks ("model/<parameter>"); none when the
  /// caller checks them, or when the run trains on through non-finite values.
  std::vector<std::string> checked_weights() const {
    std::vector<std::string> keys;
    if (!checks_weights() || !c_.run->options().stop_on_nonfinite_loss()) return keys;
    for (const auto& p : c_.run->model().module().named_parameters()) keys.push_back("model/" + p.key());
    return keys;
  }

  WriteContext c_;
  std::future<CheckpointInfo> pending_;
};

class ShardedWrites : public CheckpointWrites {
 public:
  explicit ShardedWrites(WriteContext context) : c_(std::move(context)) {}

  void save(const TrainerState& state) override {
    finish(/*block=*/true);  // one write at a time
    // Rank 0 makes the folder every rank writes into; all learn whether it could (or whether this
    // step is saved already) before anyone writes.
    int64_t begun = 1, failed = 0;
    std::string why;
    if (c_.run->rank() == 0) {
      try {
        begun = c_.store->begin_sharded(state.step) ? 1 : 0;
      } catch (const std::exception& e) {
        failed = 1;
        why = e.what();
      }
    }
    const std::vector<int64_t> agreed = max_across_ranks(*c_.run, {1 - begun, failed});
    if (agreed[1] != 0) {
      throw CheckpointError(why.empty() ? c10::str("rank 0 could not begin the checkpoint of step ", state.step, " (see its log)") : why);
    }
    if (agreed[0] != 0) return;  // saved already
    Write write;
    write.snapshot = c_.run->staged_snapshot();
    write.step = state.step;
    auto job = [store = *c_.store, staged = write.snapshot, options = c_.write_options(state.step)] {
      return store.write_shard(*staged->finish(), options);
    };
    write.files = std::async(c_.async ? std::launch::async : std::launch::deferred, job);
    write_ = std::move(write);
    if (!c_.async) finish(/*block=*/true);
  }

  void surface_errors() override {}
  void progress() override { finish(/*block=*/false); }
  void wait() override { finish(/*block=*/true); }
  void drain() noexcept override {
    // An unpublished sharded write stays a .tmp folder, removed at the next start.
    if (write_ && write_->files.valid()) write_->files.wait();
  }

 private:
  struct Write {
    std::shared_ptr<StagedSnapshot> snapshot;  // finished by the job
    int64_t step = 0;
    std::future<std::vector<FileRecord>> files;
  };

  /// Publishes the write in flight once every rank's shard is durable (`block`: waits for this
  /// rank's). Every rank calls it at the same points: it runs collectives.
  void finish(bool block) {
    if (!write_) return;
    Write& write = *write_;
    const TrainingRun& run = *c_.run;
    if (!block) {
      const bool mine = write.files.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      if (run.any_rank(!mine)) return;  // some rank is still writing
    }
    std::vector<FileRecord> files;
    std::string error;
    try {
      files = write.files.get();
    } catch (const std::exception& e) {
      error = e.what();
      log::error(error);
    }
    // Every rank's two shard files (size, XXH3 as two 32-bit halves: the collective takes a
    // maximum of signed values) and whether it failed, in one collective.
    const int64_t world = run.world_size(), rank = run.rank();
    std::vector<int64_t> table(static_cast<size_t>(1 + 6 * world), 0);
    table[0] = error.empty() ? 0 : 1;
    for (const auto& f : files) {
      for (int k = 0; k < 2; ++k) {
        if (f.name == CheckpointStore::shard_file(rank, world, k == 0 ? "weights" : "optimizer")) {
          const size_t at = static_cast<size_t>(1 + 6 * rank + 3 * k);
          table[at] = static_cast<int64_t>(f.size);
          table[at + 1] = static_cast<int64_t>(f.xxh3 >> 32);
          table[at + 2] = static_cast<int64_t>(f.xxh3 & 0xffffffffu);
        }
      }
    }
    const std::shared_ptr<StagedSnapshot> staged = write.snapshot;  // finished by the job when it succeeded
    const int64_t step = write.step;
    if (error.empty()) {  // before rank 0 renames the folder
      const auto folder = c_.store->root() / (detail::checkpoint_folder_name(step) + ".tmp");
      for (const auto& d : c_.destinations) d->shard_written(step, folder, files);
    }
    table = max_across_ranks(run, table);
    write_.reset();
    if (table[0] != 0) {
      throw CheckpointError(error.empty() ? c10::str("checkpoint of step ", step,
                                                     ": another rank failed to write its shard (see its log); the previous checkpoint is kept")
                                          : error);
    }
    if (rank != 0) {
      for (const auto& d : c_.destinations) d->shards_published(step, nullptr);
      return;
    }
    std::vector<FileRecord> records;
    for (const auto& f : files) {
      if (f.name.rfind("shard-", 0) != 0) records.push_back(f);  // rank 0's common files
    }
    for (int64_t r = 0; r < world; ++r) {
      for (int k = 0; k < 2; ++k) {
        const size_t at = static_cast<size_t>(1 + 6 * r + 3 * k);
        records.push_back({CheckpointStore::shard_file(r, world, k == 0 ? "weights" : "optimizer"), static_cast<uint64_t>(table[at]),
                           (static_cast<uint64_t>(table[at + 1]) << 32) | static_cast<uint64_t>(table[at + 2])});
      }
    }
    const CheckpointInfo info = c_.store->finish_sharded(*staged->finish(), records, c_.write_options(step));
    for (const auto& d : c_.destinations) d->shards_published(step, &info);
    apply_retention(c_);
    log::info(c10::str("checkpoint written: ", info.dir.string(), " (", world, " shards)"));
  }

  WriteContext c_;
  std::optional<Write> write_;
};

}  // namespace

std::unique_ptr<CheckpointWrites> unsharded_writes(WriteContext context) { return std::make_unique<UnshardedWrites>(std::move(context)); }
std::unique_ptr<CheckpointWrites> sharded_writes(WriteContext context) { return std::make_unique<ShardedWrites>(std::move(context)); }

}  // namespace frugal
