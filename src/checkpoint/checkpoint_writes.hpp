#pragma once
// How a checkpoint's state is written, chosen once when the fit begins: by rank 0 alone
// (replicas hold the same state), or with a sharded optimizer by every rank (its own shard),
// rank 0 publishing once every shard is durable. Either way each destination hears of the
// published checkpoint, and then retention runs.

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "frugal/checkpoint/checkpoint_destination.hpp"
#include "frugal/checkpoint/checkpoint_store.hpp"

namespace frugal {

struct TrainerState;

struct WriteContext {
  const TrainingRun* run = nullptr;
  const CheckpointStore* store = nullptr;
  std::vector<std::shared_ptr<CheckpointDestination>> destinations;
  bool async = true;
  std::function<CheckpointWriteOptions(int64_t step)> write_options;
};

class CheckpointWrites {
 public:
  virtual ~CheckpointWrites() = default;
  /// Starts the checkpoint of `state`, after the previous one is done. Every rank calls it.
  virtual void save(const TrainerState& state) = 0;
  /// Whether the writer refuses non-finite weights itself, on its host copy (off the training
  /// thread); otherwise the caller checks them before save, a collective.
  virtual bool checks_weights() const { return false; }
  /// Rethrows the error of a background write that has ended; never waits, no collective.
  virtual void surface_errors() = 0;
  /// At a step boundary: publishes a write that every rank has finished. Every rank calls it.
  virtual void progress() = 0;
  /// Waits for the write in flight and publishes it; rethrows its error. Every rank calls it.
  virtual void wait() = 0;
  /// Leaving after an error: lets a write in flight finish (the directory stays consistent) and
  /// logs its error.
  virtual void drain() noexcept = 0;
};

std::unique_ptr<CheckpointWrites> unsharded_writes(WriteContext context);
std::unique_ptr<CheckpointWrites> sharded_writes(WriteContext context);

}  // namespace frugal
