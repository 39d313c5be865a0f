#pragma once
// The whole model's weights from a checkpoint, sharded or not, without building the model: the
// trained weights assembled from every rank's shard (each range placed where its layout says), the
// buffers and frozen parameters from state.pt, under the model's state_dict names. What
// `frugal-checkpoint export` writes as safetensors, loadable by Frugal, torchvision and
// transformers alike.
//
//   frugal::CheckpointStore store("runs/bert/checkpoints");
//   auto found = store.find_latest_valid();
//   frugal::write_safetensors("model.safetensors", frugal::consolidated_weights(store, found->info));

#include <string>
#include <utility>
#include <vector>

#include "frugal/checkpoint/checkpoint_store.hpp"

namespace frugal {

/// Every weight and buffer by name, in state.pt's order then the sharded parameters by name.
/// CheckpointError naming the file when a shard is damaged or does not cover a parameter.
std::vector<std::pair<std::string, torch::Tensor>> consolidated_weights(const CheckpointStore& store, const CheckpointInfo& info);

}  // namespace frugal
