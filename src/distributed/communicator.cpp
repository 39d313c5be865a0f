// connect(): the TCP store rendezvous and the c10d backends behind frugal::Communicator.
#include "frugal/distributed/communicator.hpp"

#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <exception>
#include <mutex>
#include <functional>
#include <map>

#include "base/collectives.hpp"
#include "distributed/c10d_backends.hpp"
#include "frugal/base/preemption.hpp"
#include "frugal/log.hpp"

namespace frugal {

using detail::CompletedCollective;
using detail::ThenPending;
using detail::check_chunks;
using detail::gather_text_by_sums;

void CommunicatorOptions::validate() const {
  if (!(timeout_seconds() > 0)) {
    throw OptionError("timeout_seconds", c10::str("timeout_seconds must be > 0, got ", timeout_seconds()));
  }
}

namespace {


// For the terminate handler: the collective last started, and the Trainer's account of the run.
std::atomic<const char*> last_collective{"the start-up"};
std::mutex failure_context_mutex;
std::function<std::string()> failure_context;
World terminate_world;
std::string terminate_backend;
std::terminate_handler previous_terminate = nullptr;

[[noreturn]] void on_terminate() {
  const std::exception_ptr current = std::current_exception();
  if (!current) {
    if (previous_terminate) previous_terminate();
    std::abort();
  }
  std::string what = "an exception that is not a std::exception";
  try {
    std::rethrow_exception(current);
  } catch (const std::exception& e) {
    what = message_of(e);
  } catch (...) {
  }
  std::string where;
  try {
    std::lock_guard lock(failure_context_mutex);
    if (failure_context) where = "; " + failure_context();
  } catch (...) {
  }
  const std::string message = c10::str(
      "frugal: rank ", terminate_world.rank, " of ", terminate_world.world_size, ": ", terminate_backend, " failed inside ",
      last_collective.load(), ": ", what, ". The ranks' collectives do not match (ranks running different code or settings: a ",
      "collective mismatch) or a peer failed", where, "\n");
  ssize_t ignored = ::write(STDERR_FILENO, message.data(), message.size());
  (void)ignored;
  ::_exit(1);
}


CommunicationError collective_failed(const char* what, const World& world, const std::string& backend,
                                     const std::exception& e) {
  return CommunicationError(c10::str(what, " on rank ", world.rank, " of ", world.world_size, " (", backend,
                                     ") failed, a peer may have died: ", message_of(e)));
}



class C10dPending : public PendingCollective {
 public:
  C10dPending(c10::intrusive_ptr<c10d::Work> work, std::vector<torch::Tensor> tensors, World world, std::string backend,
              std::chrono::milliseconds timeout, const char* what = "all_reduce")
      : work_(std::move(work)), tensors_(std::move(tensors)), world_(std::move(world)), backend_(std::move(backend)),
        timeout_(timeout), what_(what) {}
  void wait() override {
    if (!work_) return;
    try {
      work_->wait(timeout_);
    } catch (const std::exception& e) {
      throw collective_failed(what_, world_, backend_, e);
    }
    work_.reset();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<torch::Tensor> tensors_;  // alive until the collective is done
  World world_;
  std::string backend_;
  std::chrono::milliseconds timeout_;
  const char* what_;
};

class C10dCommunicator : public Communicator {
 public:
  // `control` carries any(): a gloo group (host-side; gloo's own group, or one beside NCCL), or
  // null to use `backend` with a CUDA tensor.
  C10dCommunicator(c10::intrusive_ptr<c10d::Backend> backend, c10::intrusive_ptr<c10d::Backend> control,
                   const World& world, std::chrono::milliseconds timeout)
      : backend_(std::move(backend)), control_(std::move(control)), world_(world), timeout_(timeout) {}
  int64_t rank() const override { return world_.rank; }
  int64_t world_size() const override { return world_.world_size; }
  std::string backend() const override { return backend_->getBackendName(); }

  void all_reduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override {
    for_each_bucket(tensors, [&](std::vector<torch::Tensor>& flat) { start_all_reduce(flat[0], op)->wait(); });
  }
  std::unique_ptr<PendingCollective> start_all_reduce(torch::Tensor flat, ReduceOp op) override {
    last_collective = "all_reduce";
    std::vector<torch::Tensor> tensors{std::move(flat)};
    try {
      auto work = backend_->allreduce(tensors, reduce_options(op));
      return std::make_unique<C10dPending>(std::move(work), std::move(tensors), world_, backend(), timeout_);
    } catch (const std::exception& e) {
      throw collective_failed("all_reduce", world_, backend(), e);
    }
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter(torch::Tensor input, torch::Tensor output) override {
    check_chunks("reduce_scatter", input, output, world_.world_size);
    last_collective = "reduce_scatter";
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    options.timeout = timeout_;
    try {
      auto work = backend_->_reduce_scatter_base(output, input, options);
      return std::make_unique<C10dPending>(std::move(work), std::vector<torch::Tensor>{input, output}, world_, backend(), timeout_,
                                           "reduce_scatter");
    } catch (const std::exception& e) {
      throw collective_failed("reduce_scatter", world_, backend(), e);
    }
  }
  std::unique_ptr<PendingCollective> start_all_gather(torch::Tensor input, torch::Tensor output) override {
    check_chunks("all_gather", output, input, world_.world_size);
    last_collective = "all_gather";
    c10d::AllgatherOptions options;
    options.timeout = timeout_;
    try {
      auto work = backend_->_allgather_base(output, input, options);
      return std::make_unique<C10dPending>(std::move(work), std::vector<torch::Tensor>{input, output}, world_, backend(), timeout_,
                                           "all_gather");
    } catch (const std::exception& e) {
      throw collective_failed("all_gather", world_, backend(), e);
    }
  }
  std::vector<std::string> all_gather_text(const std::string& mine) override {
    auto& channel = control_ ? control_ : backend_;
    const torch::Device device = control_ ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, local_device());
    return gather_text_by_sums(mine, world_.rank, world_.world_size, device, [&](torch::Tensor& t) {
      std::vector<torch::Tensor> one{t};
      run("all_gather_text", [&] { return channel->allreduce(one, reduce_options(ReduceOp::sum)); });
    });
  }
  bool any(bool local) override {
    auto& channel = control_ ? control_ : backend_;
    const torch::Device device = control_ ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, local_device());
    std::vector<torch::Tensor> flag{torch::full({1}, local ? 1 : 0, torch::TensorOptions().dtype(torch::kInt).device(device))};
    run("any", [&] { return channel->allreduce(flag, reduce_options(ReduceOp::max)); });
    return flag[0].item<int>() != 0;
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
  c10d::AllreduceOptions reduce_options(ReduceOp op) const {
    c10d::AllreduceOptions options;
    options.reduceOp = op == ReduceOp::sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    options.timeout = timeout_;
    return options;
  }
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
    last_collective = what;
    try {
      launch()->wait(timeout_);
    } catch (const std::exception& e) {
      throw collective_failed(what, world_, backend(), e);
    }
  }
  c10::DeviceIndex local_device() const {
    return static_cast<c10::DeviceIndex>(world_.local_rank % std::max<int64_t>(1, torch::cuda::device_count()));
  }

  c10::intrusive_ptr<c10d::Backend> backend_;
  c10::intrusive_ptr<c10d::Backend> control_;
  World world_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<Communicator> connect(const World& world, const CommunicatorOptions& options) {
  options.validate();
  if (world.world_size == 1 && options.backend() == CollectiveBackend::automatic) return std::make_shared<SingleProcessCommunicator>();
  // When a peer dies, a write to its socket raises SIGPIPE, whose default action kills this
  // process before the backend can report the error (seen in CI as exit code -13). Python
  // ignores SIGPIPE at start-up, which is why torch's own jobs never meet this; we do it here,
  // unless the program installed a handler of its own.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds() * 1000.0));
  CollectiveBackend chosen = options.backend();
  if (chosen == CollectiveBackend::automatic) chosen = torch::cuda::is_available() ? CollectiveBackend::nccl : CollectiveBackend::gloo;
  const std::string name = to_string(chosen);

  // The rendezvous waits for every rank (up to the timeout) and cannot look at a recorded signal.
  const preemption::ExitAtOnce exit_on_signal("connecting to the other ranks");
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
  auto backend = chosen == CollectiveBackend::nccl ? detail::make_nccl_backend(store, world, timeout) : detail::make_gloo_backend(store, world, timeout);
  // Decisions (stop, pre-emption) go over a host-side gloo group beside NCCL, as torch users do
  // with a gloo "cpu group": reading a flag from a GPU would wait for all work queued before it.
  c10::intrusive_ptr<c10d::Backend> control = chosen == CollectiveBackend::gloo ? backend : nullptr;
  if (chosen == CollectiveBackend::nccl) {
    try {
      control = detail::make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>("frugal_control", store), world, timeout);
    } catch (const CommunicationError& e) {
      log::warn(c10::str("no host-side channel beside NCCL (", e.what(), "): stop decisions will sync the GPU"));
    }
  }
  log::info(c10::str("rank ", world.rank, " of ", world.world_size, " connected (", name, ", launched by ",
                     world.launcher, ")"));
  terminate_world = world;
  terminate_backend = name;
  if (std::get_terminate() != on_terminate) previous_terminate = std::set_terminate(on_terminate);
  return std::make_shared<C10dCommunicator>(std::move(backend), std::move(control), world, timeout);
}

void set_failure_context(std::function<std::string()> context) {
  std::lock_guard lock(failure_context_mutex);
  failure_context = std::move(context);
}

}  // namespace frugal
