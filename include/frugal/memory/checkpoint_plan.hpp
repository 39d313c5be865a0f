#pragma once
// Which parts of a model are activation-checkpointed (see activation_checkpoint.hpp), as the
// models and the examples' `model.activation_checkpointing` key take it:
//   off        nothing: every activation is kept (fastest, most memory)
//   full       every layer (BERT encoder layer, ResNet bottleneck block): least memory of the
//              per-layer choices, one extra forward pass of time
//   every:K    layers 0, K, 2K, ...: memory and time in between
//   attention  BERT only: the attention core of each layer (scores, softmax, dropout, context),
//              the part that grows with the square of the sequence: cheap to recompute
//   stage      ResNet only: each of the four stages as one segment (fewest saved inputs, the
//              recomputation holds one stage's activations at a time)
// The last segment (layer, block, stage) is never recomputed: its backward comes right after its
// forward, so keeping its activations holds no more memory than recomputing them would.
// `offload` moves the saved inputs to pinned host memory on CUDA (ignored on the CPU).
//
//   auto plan = frugal::ActivationCheckpointing::parse("every:2", "model.activation_checkpointing");
//   net->bert->encoder->set_activation_checkpointing(plan);

#include <cstdint>
#include <string>

#include "frugal/memory/activation_checkpoint.hpp"

namespace frugal {

enum class CheckpointScope { off, full, every, attention, stage };

struct ActivationCheckpointing {
  CheckpointScope scope = CheckpointScope::off;
  int64_t every = 1;     // with scope every: the K of every:K
  bool offload = false;  // saved inputs in pinned host memory (CUDA)

  /// off, full, every:K (K >= 1), attention or stage; OptionError naming `key` and the value otherwise.
  static ActivationCheckpointing parse(const std::string& text, const std::string& key = "activation_checkpointing");
  std::string to_string() const;
  bool enabled() const { return scope != CheckpointScope::off; }
  /// Whether layer `index` (0-based) is a checkpointed segment, for the per-layer scopes.
  bool covers_layer(int64_t index) const;
  ActivationCheckpointOptions options() const { return ActivationCheckpointOptions().offload(offload); }
};

}  // namespace frugal
