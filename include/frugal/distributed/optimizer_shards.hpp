#pragma once
// Sharded optimizer state (ZeRO stage 1 and 2, as DeepSpeed calls them). The trained parameters
// are laid out in the gradient buckets, each bucket cut into one equal chunk per rank; rank r owns
// chunk r of every bucket: contiguous ranges ("pieces") of the parameters in it. The optimizer the
// program's factory built (its parameter groups and options untouched) is made to update only
// this rank's pieces: each piece is a flat view of its range of the parameter, so the optimizer
// keeps state for 1/N of the elements and steps them in place; then every rank's pieces are
// all-gathered so that all parameters are equal again. Checkpoints keep each rank's pieces (see
// snapshot.hpp) and load into any other layout, sharded or not.
//
//   OptimizerShards shards(world_size, rank, bucket_cap_bytes);
//   shards.attach(module, optimizer);          // before the optimizer has state
//   ... backward, buckets reduced ...
//   shards.take_gradients(reduced, /*chunks=*/true);
//   optimizer.step();
//   shards.gather_parameters(communicator);

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "frugal/base/snapshot.hpp"
#include "frugal/base/communicator.hpp"

namespace frugal {

class OptimizerShards {
 public:
  OptimizerShards(int64_t world_size, int64_t rank, int64_t bucket_cap_bytes);
  ~OptimizerShards();
  OptimizerShards(const OptimizerShards&) = delete;
  OptimizerShards& operator=(const OptimizerShards&) = delete;

  /// Makes `optimizer` (built over `module`, no state yet) update only this rank's pieces of the
  /// module's trained parameters. TrainingError if it already has state, if it updates a tensor
  /// that is not one of the module's parameters, or if it is LBFGS (which needs the whole model).
  void attach(torch::nn::Module& module, torch::optim::Optimizer& optimizer);
  bool attached() const;
  int64_t world_size() const;
  int64_t rank() const;
  int64_t bucket_cap_bytes() const;
  /// Elements every piece starts at a multiple of (in its parameter): the optimizer's state
  /// block with 8-bit states, else 1. The gradient buckets must use the same.
  int64_t element_alignment() const;

  /// The trained parameters in module order: what the gradient buckets must be built over.
  const std::vector<torch::Tensor>& trained() const;
  /// Elements this rank's pieces cover, and all trained elements.
  int64_t owned_elements() const;
  int64_t total_elements() const;

  /// After the gradient reduction: `reduced[b]` is bucket b's mean, the whole padded bucket
  /// (chunks false) or this rank's chunk of it (chunks true). Each piece's gradient becomes a
  /// view of its part.
  void take_gradients(const std::vector<torch::Tensor>& reduced, bool chunks);
  /// Before the optimizer step: pieces of parameters that are not contiguous (channels-last
  /// weights) are copies, refreshed here from their parameter.
  void refresh_pieces();
  /// Every rank's pieces to every rank, bucket by bucket: all parameters equal again.
  void gather_parameters(Communicator& communicator);

  /// The layout of every rank, for a checkpoint.
  std::shared_ptr<const ShardingInfo> info() const;
  /// This rank's pieces of the weights: views of the trained weights (copy them before the next
  /// step changes those).
  std::vector<torch::Tensor> weight_pieces() const;

  /// Puts a checkpoint's trained weights and optimizer state into this rank's pieces, whatever
  /// layout wrote it: `sharded` (any world size; reads only the shards that overlap this rank's
  /// pieces, then gathers the parameters), or, when null, an unsharded checkpoint whose whole
  /// weights are already in the parameters and whose optimizer serialization is `whole_optimizer`.
  void load(const ShardSource* sharded, const std::string& whole_optimizer, torch::optim::Optimizer& optimizer,
            Communicator& communicator, const torch::Device& device);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// For a run whose optimizer is not sharded: the trained weights and the optimizer state of a
/// sharded checkpoint, assembled from every shard into `module`'s parameters and `optimizer`.
void load_sharded_into_whole(const ShardSource& source, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                             const torch::Device& device);

}  // namespace frugal
