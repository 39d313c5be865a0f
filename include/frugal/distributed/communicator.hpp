#pragma once
// The collectives data-parallel training needs, behind a small interface with three
// implementations: a single-process no-op, c10d Gloo (CPU tensors; CPU clusters and tests) and
// c10d NCCL (CUDA tensors). A rank that dies makes the others fail with a CommunicationError
// within the timeout instead of hanging.
//
//   auto comm = frugal::connect(frugal::detect_world(frugal::process_environment()),
//                               frugal::CommunicatorOptions().backend("gloo"));
//   std::vector<torch::Tensor> grads{g};
//   comm->all_reduce(grads);     // sum across ranks, in place

#include <torch/arg.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "frugal/distributed/world.hpp"
#include "frugal/errors.hpp"

namespace frugal {

/// A collective failed: a peer died, the timeout passed, or the backend reported an error.
class CommunicationError : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp { sum, max };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual std::string backend() const = 0;
  /// Reduces each tensor across ranks, in place, and waits for the result. Tensors of one device
  /// and dtype are flattened into one buffer and reduced with one collective.
  virtual void all_reduce(std::vector<torch::Tensor>& tensors, ReduceOp op = ReduceOp::sum) = 0;
  /// Overwrites each tensor with rank `root`'s.
  virtual void broadcast(std::vector<torch::Tensor>& tensors, int64_t root = 0) = 0;
  virtual void barrier() = 0;
};

class SingleProcessCommunicator : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_reduce(std::vector<torch::Tensor>&, ReduceOp) override {}
  void broadcast(std::vector<torch::Tensor>&, int64_t) override {}
  void barrier() override {}
};

struct CommunicatorOptions {
  /// "auto" (nccl with CUDA, else gloo), "gloo", "nccl".
  TORCH_ARG(std::string, backend) = "auto";
  /// How long a collective or the rendezvous may wait for a peer.
  TORCH_ARG(double, timeout_seconds) = 300.0;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

/// A single-process communicator for a world of one; otherwise rendezvous through a TCP store at
/// world.master_addr:master_port and the chosen c10d backend.
std::shared_ptr<Communicator> connect(const World& world, const CommunicatorOptions& options = {});

}  // namespace frugal
