#pragma once
// Everything needed to continue a fit exactly, held in host memory: taking one costs copies to
// the CPU, and writing it can then happen on another thread while training goes on.
//   tensors: "model/<parameter or buffer>", "policy/<policy name>/<key>", "rng/<device>"
//   optimizer: the optimizer's own serialization (torch::optim::Optimizer::save) as bytes, or
//              (optimizer_copy) a host-memory copy of it to serialize later, off the training thread
//   state, data: the Trainer's counters and the data loader's position

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>

#include <map>
#include <string>

#include "frugal/core/trainer_state.hpp"
#include "frugal/data/data_loader.hpp"

namespace frugal {

struct TrainingSnapshot {
  std::map<std::string, torch::Tensor> tensors;
  std::string optimizer;
  std::shared_ptr<torch::optim::Optimizer> optimizer_copy;

  /// The optimizer's bytes, serializing optimizer_copy if that is what the snapshot holds.
  std::string optimizer_bytes() const;
  TrainerState state;
  DataPosition data;
  int64_t world_size = 1;
};

}  // namespace frugal
