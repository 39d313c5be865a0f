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

#include <functional>
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

struct CommunicatorOptions {
  /// "auto" (nccl with CUDA, else gloo), "gloo", "nccl".
  TORCH_ARG(std::string, backend) = "auto";
  /// How long a collective or the rendezvous may wait for a peer.
  TORCH_ARG(double, timeout_seconds) = 300.0;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

/// For a world of one with backend "auto", a single-process communicator; otherwise rendezvous
/// through a TCP store at world.master_addr:master_port and the chosen c10d backend (a world of
/// one with an explicit backend runs the real backend: the GPU check exercises NCCL that way).
std::shared_ptr<Communicator> connect(const World& world, const CommunicatorOptions& options = {});

/// Where the run stands ("step 12; the last good checkpoint is ..."), for the one message printed
/// when the communication library ends the process from a thread of its own (gloo's
/// EnforceNotMet on a collective mismatch): connect() turns that std::terminate into that
/// message and exit code 1 instead of SIGABRT. The Trainer sets it during fit(); {} clears it.
void set_failure_context(std::function<std::string()> context);

}  // namespace frugal
