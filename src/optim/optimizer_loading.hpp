#pragma once
// Loading a checkpoint's optimizer state (one process's serialization) into whatever optimizer
// the resuming run has: Frugal's optimizers convert between 8-bit and fp32 states themselves;
// LibTorch's own (SGD, Adam, AdamW...) get an 8-bit checkpoint's moments as fp32 values through
// the portable state; any other optimizer is refused an 8-bit checkpoint, naming it.
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <string>

namespace frugal::detail {

/// Loads `bytes` (optimizer_archive_bytes of the checkpoint's optimizer) into `optimizer`, whose
/// parameters are `module`'s, on `device`. CheckpointError naming the optimizer when it cannot
/// take the state.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const torch::nn::Module& module, const std::string& bytes,
                          const c10::Device& device);

}  // namespace frugal::detail
