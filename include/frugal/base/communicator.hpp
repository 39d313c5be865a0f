#pragma once
// The collectives data-parallel training needs, as an interface the Trainer and the policies use
// without knowing the backend: a single-process no-op here, c10d Gloo and NCCL in
// frugal/distributed/communicator.hpp (connect()).
//
//   std::vector<torch::Tensor> grads{g};
//   communicator.all_reduce(grads);     // sum across ranks, in place

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "frugal/errors.hpp"

namespace frugal {

/// A collective failed: a peer died, the timeout passed, or the backend reported an error.
class CommunicationError : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp { sum, max };

/// A collective in flight (Communicator::start_all_reduce). wait() returns once its result may
/// be used on the tensor's device (for NCCL: the current CUDA stream waits, the host does not),
/// or throws CommunicationError.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual std::string backend() const = 0;
  /// Reduces each tensor across ranks, in place, and waits for the result. Tensors of one device
  /// and dtype are flattened into one buffer and reduced with one collective.
  virtual void all_reduce(std::vector<torch::Tensor>& tensors, ReduceOp op = ReduceOp::sum) = 0;
  /// Starts reducing one contiguous tensor in place across ranks and returns without waiting:
  /// data-parallel training overlaps it with the rest of the backward pass. Every rank must start
  /// its collectives in the same order.
  virtual std::unique_ptr<PendingCollective> start_all_reduce(torch::Tensor flat, ReduceOp op = ReduceOp::sum) = 0;
  /// Starts a reduce-scatter: `input` holds world_size equal chunks end to end; the sum across
  /// ranks of chunk r lands in rank r's `output` (one chunk). Sharded data parallelism reduces its
  /// gradient buckets this way. By default an all-reduce of `input`, then a copy.
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter(torch::Tensor input, torch::Tensor output);
  /// Starts an all-gather: every rank's `input` (one chunk) lands end to end in `output`, in rank
  /// order. By default an all-reduce of a zero buffer holding this rank's chunk at its place.
  virtual std::unique_ptr<PendingCollective> start_all_gather(torch::Tensor input, torch::Tensor output);
  /// Overwrites each tensor with rank `root`'s.
  virtual void broadcast(std::vector<torch::Tensor>& tensors, int64_t root = 0) = 0;
  virtual void barrier() = 0;
  /// True if `local` is true on any rank: how replicas agree on a decision (stop, pre-emption).
  /// Travels over a host-side (gloo) channel where there is one, so it never waits for a GPU.
  virtual bool any(bool local) = 0;
  /// Every rank's `mine`, in rank order (start-up checks: a few KB, host-side where possible).
  /// The default goes through all_reduce on CPU tensors (gloo, one process).
  virtual std::vector<std::string> all_gather_text(const std::string& mine);
};

class SingleProcessCommunicator : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_reduce(std::vector<torch::Tensor>&, ReduceOp) override {}
  std::unique_ptr<PendingCollective> start_all_reduce(torch::Tensor, ReduceOp) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter(torch::Tensor input, torch::Tensor output) override;
  std::unique_ptr<PendingCollective> start_all_gather(torch::Tensor input, torch::Tensor output) override;
  void broadcast(std::vector<torch::Tensor>&, int64_t) override {}
  void barrier() override {}
  bool any(bool local) override { return local; }
};

}  // namespace frugal
