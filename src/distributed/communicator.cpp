// connect(): the TCP store rendezvous and the c10d backends behind frugal::Communicator.
#include "frugal/distributed/communicator.hpp"

#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <map>

#include "distributed/c10d_backends.hpp"
#include "frugal/log.hpp"

namespace frugal {

void CommunicatorOptions::validate() const {
  if (backend() != "auto" && backend() != "gloo" && backend() != "nccl") {
    throw OptionError("backend", "backend must be auto, gloo or nccl, got '" + backend() + "'");
  }
  if (!(timeout_seconds() > 0)) {
    throw OptionError("timeout_seconds", c10::str("timeout_seconds must be > 0, got ", timeout_seconds()));
  }
}

namespace {

class C10dCommunicator : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<c10d::Backend> backend, const World& world, std::chrono::milliseconds timeout)
      : backend_(std::move(backend)), world_(world), timeout_(timeout) {}
  int64_t rank() const override { return world_.rank; }
  int64_t world_size() const override { return world_.world_size; }
  std::string backend() const override { return backend_->getBackendName(); }

  void all_reduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override {
    c10d::AllreduceOptions options;
    options.reduceOp = op == ReduceOp::sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    options.timeout = timeout_;
    for_each_bucket(tensors, [&](std::vector<torch::Tensor>& flat) {
      run("all_reduce", [&] { return backend_->allreduce(flat, options); });
    });
  }
  void broadcast(std::vector<torch::Tensor>& tensors, int64_t root) override {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = timeout_;
    for_each_bucket(tensors, [&](std::vector<torch::Tensor>& flat) {
      run("broadcast", [&] { return backend_->broadcast(flat, options); });
    });
  }
  void barrier() override {
    c10d::BarrierOptions options;
    options.timeout = timeout_;
    run("barrier", [&] { return backend_->barrier(options); });
  }

 private:
  // c10d takes one tensor per collective (a list means one per device), so tensors of the same
  // device and dtype travel together, flattened into one buffer: one collective per group.
  template <class Collective>
  void for_each_bucket(std::vector<torch::Tensor>& tensors, Collective collective) {
    std::map<std::pair<std::string, c10::ScalarType>, std::vector<size_t>> groups;
    for (size_t i = 0; i < tensors.size(); ++i) groups[{tensors[i].device().str(), tensors[i].scalar_type()}].push_back(i);
    for (const auto& [key, members] : groups) {
      std::vector<torch::Tensor> flat{members.size() == 1 && tensors[members[0]].is_contiguous()
                                          ? tensors[members[0]]
                                          : flatten(tensors, members)};
      collective(flat);
      if (flat[0].data_ptr() == tensors[members[0]].data_ptr()) continue;  // reduced in place
      int64_t offset = 0;
      for (size_t i : members) {
        const int64_t n = tensors[i].numel();
        tensors[i].copy_(flat[0].narrow(0, offset, n).view_as(tensors[i]));
        offset += n;
      }
    }
  }
  static torch::Tensor flatten(const std::vector<torch::Tensor>& tensors, const std::vector<size_t>& members) {
    std::vector<torch::Tensor> parts;
    for (size_t i : members) parts.push_back(tensors[i].reshape({-1}));
    return torch::cat(parts);
  }

  template <class Launch>
  void run(const char* what, Launch launch) {
    try {
      launch()->wait(timeout_);
    } catch (const std::exception& e) {
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
      throw CommunicationError(c10::str(what, " on rank ", world_.rank, " of ", world_.world_size, " (", backend(),
                                        ") failed, a peer may have died: ",
                                        c10_error ? c10_error->what_without_backtrace() : e.what()));
    }
  }

  c10::intrusive_ptr<c10d::Backend> backend_;
  World world_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<Communicator> connect(const World& world, const CommunicatorOptions& options) {
  options.validate();
  if (world.world_size == 1) return std::make_shared<SingleProcessCommunicator>();
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds() * 1000.0));
  std::string name = options.backend();
  if (name == "auto") name = torch::cuda::is_available() ? "nccl" : "gloo";

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(world.master_port);
  // Under torchrun the agent serves the store already; otherwise rank 0 does.
  store_options.isServer = world.rank == 0 && !world.agent_store;
  store_options.numWorkers = world.agent_store ? std::nullopt : std::optional<size_t>(world.world_size);
  store_options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, store_options);
  } catch (const std::exception& e) {
    throw CommunicationError(c10::str("rendezvous at ", world.master_addr, ":", world.master_port, " failed for rank ",
                                      world.rank, " of ", world.world_size, ": ", e.what()));
  }
  auto backend = name == "nccl" ? detail::make_nccl_backend(store, world, timeout) : detail::make_gloo_backend(store, world, timeout);
  log::info(c10::str("rank ", world.rank, " of ", world.world_size, " connected (", name, ", launched by ",
                     world.launcher, ")"));
  return std::make_shared<C10dCommunicator>(std::move(backend), world, timeout);
}

}  // namespace frugal
