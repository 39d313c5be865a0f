#pragma once
// An optimizer's state independent of how its parameters were split across ranks: for each
// parameter (by the module's name), pieces covering ranges of its elements in row-major order.
// It is read from, and loaded back through, the optimizer's own serialization (Optimizer::save /
// load), so it works for any LibTorch optimizer whose per-parameter state is tensors shaped like
// the parameter plus scalars (SGD, Adam, AdamW, frugal::FusedAdamW, RMSprop, Adagrad...). This
// is what lets a checkpoint written by N ranks resume on M, or sharded resume unsharded.
//   per-element entries  tensors of the slot's shape (momentum, moments): stored flat, sliced
//   per-parameter entries scalars and 0-d tensors (the step count): copied to every piece

#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <string>
#include <vector>

#include "frugal/base/snapshot.hpp"

namespace frugal::detail {

/// The part of a parameter one tensor of an optimizer's groups stands for.
struct ParamSlot {
  std::string name;
  int64_t begin = 0;       // first element, row-major
  int64_t numel = 0;
  std::vector<int64_t> shape;  // the tensor's shape in the optimizer (the parameter's, or 1-D for a piece)
};
/// One list of slots per parameter group, in the optimizer's order.
using GroupSlots = std::vector<std::vector<ParamSlot>>;

struct StatePiece {
  int64_t begin = 0, numel = 0;
  std::map<std::string, c10::IValue> entries;  // empty: no state yet (never stepped)
};

struct PortableOptimizerState {
  std::vector<std::map<std::string, c10::IValue>> group_options;  // as saved; empty = keep the optimizer's
  std::map<std::string, std::vector<StatePiece>> params;
  std::map<std::string, int64_t> group_of;  // each parameter's group when saved

  /// Reads an optimizer's serialization whose groups hold `slots`; adds its pieces (and, the first
  /// time, its group options). Throws CheckpointError naming `source` when the groups differ.
  void add_serialized(const std::string& bytes, const GroupSlots& slots, const std::string& source);
  /// Loads the state of `slots` into `optimizer` (whose groups hold tensors laid out as `slots`)
  /// through its own deserialization, on `device`. Throws CheckpointError naming `source` when a
  /// slot is only partly covered or its pieces disagree.
  void load_into(torch::optim::Optimizer& optimizer, const GroupSlots& slots, const c10::Device& device,
                 const std::string& source) const;
};

/// The slots of one rank's optimizer in a sharded layout: its pieces by (group, index).
GroupSlots slots_of(const std::vector<ShardPieceInfo>& pieces, size_t groups);

/// The slots of an optimizer built over `module`'s parameters: every tensor of its groups must be
/// one of them (CheckpointError otherwise).
GroupSlots whole_parameter_slots(const torch::optim::Optimizer& optimizer, const torch::nn::Module& module);

}  // namespace frugal::detail
