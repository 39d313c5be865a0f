#pragma once
// Everything needed to continue a fit exactly, held in host memory: taking one costs copies to
// the CPU, and writing it can then happen on another thread while training goes on.
//   tensors: "model/<parameter or buffer>", "policy/<policy name>/<key>", "rng/<device>"
//   optimizer: the optimizer's own serialization (torch::optim::Optimizer::save) as bytes, or
//              (optimizer_copy) a host-memory copy of it to serialize later, off the training thread
//   state, data: the Trainer's counters and the data loader's position
// With a sharded optimizer (sharded data parallelism) each rank's snapshot holds its own shard:
// `sharding` says which ranges of which parameters every rank owns, `shard_weights` this rank's
// ranges of the weights, the optimizer this rank's part; "model/" then holds only the tensors no
// shard covers (buffers, frozen parameters). A sharded checkpoint read back gives `shards`, which
// reads any rank's part on demand.

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frugal/base/trainer_state.hpp"
#include "frugal/base/data_position.hpp"

namespace frugal {

/// A range of a parameter's elements (row-major) that one rank owns, and where its optimizer
/// state sits: tensor `index` of parameter group `group` of that rank's optimizer.
struct ShardPieceInfo {
  std::string param;
  int64_t begin = 0, numel = 0;
  int64_t group = 0, index = 0;
};

/// Every rank's pieces: the whole layout of a sharded optimizer.
struct ShardingInfo {
  int64_t world_size = 1;
  std::vector<std::vector<ShardPieceInfo>> pieces;  // [rank]
  std::map<std::string, std::vector<int64_t>> shapes;  // of every sharded parameter
};

/// One rank's part of a sharded checkpoint.
struct ShardContents {
  std::vector<torch::Tensor> weights;  // one flat tensor per piece, in the rank's piece order
  std::string optimizer;               // that rank's optimizer serialization
};

/// A sharded checkpoint on disk: its layout, and each rank's part read when asked for.
struct ShardSource {
  ShardingInfo info;
  std::string location;                                 // for messages
  std::function<ShardContents(int64_t rank)> read;      // CheckpointError naming the file when damaged
};

struct TrainingSnapshot {
  std::map<std::string, torch::Tensor> tensors;
  std::string optimizer;
  std::shared_ptr<torch::optim::Optimizer> optimizer_copy;

  /// The optimizer's bytes, serializing optimizer_copy if that is what the snapshot holds.
  std::string optimizer_bytes() const;
  /// The same bytes handed to `writer` as they are made (serialized straight into a file).
  void write_optimizer(const std::function<size_t(const void*, size_t)>& writer) const;
  TrainerState state;
  DataPosition data;
  int64_t world_size = 1;

  // A sharded optimizer's snapshot: this rank, the layout, and its weights (optimizer: its part).
  int64_t rank = 0;
  std::shared_ptr<const ShardingInfo> sharding;
  std::vector<torch::Tensor> shard_weights;
  // A sharded checkpoint read back.
  std::shared_ptr<const ShardSource> shards;

  bool sharded() const { return sharding != nullptr || shards != nullptr; }
};

/// The ranks of `written` whose pieces overlap any of `wanted` (one rank's pieces in another
/// layout): the shards a rank must read to resume. Every rank when `wanted` is null (a whole model).
std::vector<int64_t> overlapping_shards(const ShardingInfo& written, const std::vector<ShardPieceInfo>* wanted);

/// Rank `rank`'s part of a sharded checkpoint; CheckpointError naming the shard when it does not
/// hold what the layout lists.
ShardContents read_shard(const ShardSource& source, int64_t rank);

}  // namespace frugal
