#pragma once
// Dropout with the same distribution as torch::dropout (each element kept with probability 1 - p
// and scaled by 1 / (1 - p)). On the CPU the mask comes from a counter-based generator
// (SplitMix64 of seed + element index, the seed drawn from LibTorch's default CPU generator, so
// torch::manual_seed and checkpointed RNG state still fix it, whatever the thread count): about
// ten times faster than the bernoulli_ kernel at::dropout uses there, which took 15% of a BERT
// training step. Being counter-based, the mask is never stored: the backward pass replays it from
// the seed. A different random stream than PyTorch's for the same seed. On CUDA it is
// at::dropout's fused kernel.

#include <torch/types.h>

#include <cstdint>

namespace frugal::detail {

torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

/// One CPU dropout mask: a seed and the probability of dropping.
struct DropoutStream {
  uint64_t seed = 0;
  double p = 0.0;
};

/// Draws a stream's seed from LibTorch's default CPU generator.
DropoutStream draw_dropout_stream(double p);

/// x (CPU, floating) with the stream's mask applied: element i of the contiguous layout is kept and
/// scaled by 1 / (1 - p), or zeroed, by the same draw each time; a new contiguous tensor.
torch::Tensor apply_dropout(const torch::Tensor& x, const DropoutStream& stream);

}  // namespace frugal::detail
