#pragma once
// AdamW whose step is one fused kernel per group of parameters (ATen's _fused_adamw_, what
// torch.optim.AdamW(fused=True) and Hugging Face's Trainer use by default): one pass over each
// parameter, gradient and moment instead of about ten elementwise operations, on the CPU and on
// CUDA. Options, state and checkpoints are torch::optim::AdamW's, so a checkpoint written with
// either loads into the other; the arithmetic agrees with it to rounding.
//
//   auto opt = std::make_unique<frugal::FusedAdamW>(model->parameters(), torch::optim::AdamWOptions(3e-5));

#include <torch/optim/adamw.h>

#include <vector>

namespace frugal {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace frugal
