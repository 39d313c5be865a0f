#pragma once
// The c10d implementations of the Communicator interface (frugal/base/communicator.hpp): Gloo
// (CPU tensors; CPU clusters and tests) and NCCL (CUDA tensors), and how to connect to them. A rank that dies makes the others fail with a CommunicationError
// within the timeout instead of hanging.
//
//   auto comm = frugal::connect(frugal::detect_world(frugal::process_environment()),
//                               frugal::CommunicatorOptions().backend(frugal::CollectiveBackend::gloo));
//   std::vector<torch::Tensor> grads{g};
//   comm->all_reduce(grads);     // sum across ranks, in place

#include <torch/arg.h>
#include <torch/types.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frugal/base/communicator.hpp"
#include "frugal/base/enum_names.hpp"
#include "frugal/distributed/world.hpp"
#include "frugal/errors.hpp"

namespace frugal {

/// The c10d backend of the collectives (distributed.backend): automatic ("auto": NCCL when CUDA is
/// available, else Gloo; a world of one then needs none), Gloo or NCCL.
enum class CollectiveBackend { automatic, gloo, nccl };
constexpr std::array<EnumName<CollectiveBackend>, 3> names_of(CollectiveBackend) {
  return {{{CollectiveBackend::automatic, "auto"}, {CollectiveBackend::gloo, "gloo"}, {CollectiveBackend::nccl, "nccl"}}};
}

struct CommunicatorOptions {
  TORCH_ARG(CollectiveBackend, backend) = CollectiveBackend::automatic;
  /// How long a collective or the rendezvous may wait for a peer.
  TORCH_ARG(double, timeout_seconds) = 300.0;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

/// For a world of one with the automatic backend, a single-process communicator; otherwise rendezvous
/// through a TCP store at world.master_addr:master_port and the chosen c10d backend (a world of
/// one with an explicit backend runs the real backend: the GPU check exercises NCCL that way).
std::shared_ptr<Communicator> connect(const World& world, const CommunicatorOptions& options = {});

/// Where the run stands ("step 12; the last good checkpoint is ..."), for the one message printed
/// when the communication library ends the process from a thread of its own (gloo's
/// EnforceNotMet on a collective mismatch): connect() turns that std::terminate into that
/// message and exit code 1 instead of SIGABRT. The Trainer sets it during fit(); {} clears it.
void set_failure_context(std::function<std::string()> context);

}  // namespace frugal
