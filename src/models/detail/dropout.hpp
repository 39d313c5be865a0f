#pragma once
// Dropout with the same distribution as torch::dropout (each element kept with probability 1 - p
// and scaled by 1 / (1 - p)). On the CPU the mask comes from a counter-based generator
// (SplitMix64 of seed + element index, the seed drawn from LibTorch's default CPU generator, so
// torch::manual_seed and checkpointed RNG state still fix it, whatever the thread count): about
// ten times faster than the bernoulli_ kernel at::dropout uses there, which took 15% of a BERT
// training step. A different random stream than PyTorch's for the same seed. On CUDA it is
// at::dropout's fused kernel.

#include <torch/types.h>

namespace frugal::detail {

torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

}  // namespace frugal::detail
