#include "checkpoint/checkpoint_writes.hpp"

#include <c10/util/StringUtil.h>

#include <future>
#include <optional>

#include "base/checkpoint_names.hpp"
#include "checkpoint/rank_votes.hpp"
#include "frugal/base/communicator.hpp"
#include "frugal/base/trainer_state.hpp"
#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace {

using detail::any_rank;
using detail::max_across_ranks;

void apply_retention(const WriteContext& c) {
  for (const auto& d : c.destinations) d->apply_retention();
}

class UnshardedWrites : public CheckpointWrites {
 public:
  explicit UnshardedWrites(WriteContext context) : c_(std::move(context)) {}

  void save(const TrainerState& state) override {
    if (c_.run->rank() != 0) return;  // replicas hold the same state: rank 0 writes it
    wait();                           // one write at a time; its error, if any, surfaces here
    auto snapshot = std::make_shared<TrainingSnapshot>(c_.run->snapshot());
    auto job = [c = c_, snapshot, options = c_.write_options(state.step)] {
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
    write.snapshot = std::make_shared<TrainingSnapshot>(c_.run->snapshot());
    auto job = [store = *c_.store, snapshot = write.snapshot, options = c_.write_options(state.step)] { return store.write_shard(*snapshot, options); };
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
    std::shared_ptr<TrainingSnapshot> snapshot;
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
      if (any_rank(run, !mine)) return;  // some rank is still writing
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
    const std::shared_ptr<TrainingSnapshot> snapshot = write.snapshot;
    const int64_t step = snapshot->state.step;
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
    const CheckpointInfo info = c_.store->finish_sharded(*snapshot, records, c_.write_options(step));
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
