#pragma once
// Activation checkpointing: a segment of the forward pass keeps only its inputs; its inner
// activations are freed at once and computed again during backward, just before they are
// needed. Memory of a deep network's activations drops to one segment's plus the segments'
// inputs, for about one extra forward pass of time (torch.utils.checkpoint in Python; LibTorch's
// C++ API has none).
//
// What the recomputation restores, so that it computes exactly what the forward pass did:
//   - the random state (the CPU generator and those of the CUDA devices the segment touches):
//     dropout draws the same masks; afterwards the generators are put back, so the rest of the
//     run draws what it would have drawn without checkpointing;
//   - the autocast state (enabled, dtype, per device type) of the forward pass;
//   - the buffers given (BatchNorm's running statistics), so a segment's statistics are updated
//     once, not twice.
// The parameters' gradients are accumulated into .grad by the recomputation's own backward, each as
// soon as it is ready (holding a layer's worth of them until the segment is done would cost as much
// memory again as its largest activation); hooks on their gradient accumulators (the data-parallel
// buckets') fire there, once per backward for a parameter used in one segment. A parameter used
// by several segments has its accumulator run once per segment: the buckets take the later parts
// as long as the bucket is not sent yet (and say so clearly otherwise). A segment that uses a
// tensor needing a gradient without listing it among its parameters is a TrainingError.
// Outside grad mode (evaluation) the segment simply runs.
//
//   auto out = frugal::activation_checkpoint(
//       [&](const torch::autograd::variable_list& in) { return torch::autograd::variable_list{layer->forward(in[0])}; },
//       {hidden}, layer->parameters(), layer->buffers())[0];

#include <torch/arg.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <functional>
#include <vector>

namespace frugal {

/// A part of the forward pass: tensors in, tensors out. It must compute the same thing each time
/// it is called with the same inputs, random state and autocast state.
using Segment = std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)>;

struct ActivationCheckpointOptions {
  /// Restore the random state for the recomputation (dropout masks as in the forward pass).
  TORCH_ARG(bool, preserve_rng_state) = true;
  /// On CUDA: the saved inputs wait for backward in pinned host memory (copied out on a side
  /// stream during forward, back before the recomputation) instead of on the GPU. Accepted and
  /// ignored on the CPU (logged once).
  TORCH_ARG(bool, offload) = false;
};

/// Runs `segment` on `inputs` without keeping its activations, and recomputes it in backward.
/// `parameters`: every tensor needing a gradient that the segment reads other than `inputs`;
/// `buffers`: tensors the segment updates in place (restored after the recomputation).
torch::autograd::variable_list activation_checkpoint(const Segment& segment, const torch::autograd::variable_list& inputs,
                                                     const std::vector<torch::Tensor>& parameters,
                                                     const std::vector<torch::Tensor>& buffers = {},
                                                     const ActivationCheckpointOptions& options = {});

/// One tensor through a module's forward (`forward(x)`), checkpointed with the module's
/// parameters and buffers.
torch::Tensor activation_checkpoint(torch::nn::Module& module, const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                    const torch::Tensor& input, const ActivationCheckpointOptions& options = {});

}  // namespace frugal
