// Trainer::snapshot and Trainer::restore: what a checkpoint holds, and putting it back.
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <sstream>

#include "detail/host_memory.hpp"
#include "detail/optimizer_copy.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace {

// The RNGs whose draws a run makes: the CPU's and every visible GPU's.
std::vector<std::pair<std::string, at::Generator>> generators() {
  std::vector<std::pair<std::string, at::Generator>> out{{"rng/cpu", at::detail::getDefaultCPUGenerator()}};
  if (torch::cuda::is_available()) {
    for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) {
      out.emplace_back(c10::str("rng/cuda:", i), at::globalContext().defaultGenerator(c10::Device(torch::kCUDA, i)));
    }
  }
  return out;
}

std::string serialize_optimizer(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  return detail::archive_bytes(archive);
}

}  // namespace

std::string TrainingSnapshot::optimizer_bytes() const {
  return optimizer.empty() && optimizer_copy ? serialize_optimizer(*optimizer_copy) : optimizer;
}

TrainingSnapshot Trainer::snapshot() const {
  TrainingSnapshot s;
  torch::NoGradGuard no_grad;
  for (const auto& p : model_.module().named_parameters()) s.tensors["model/" + p.key()] = detail::host_copy(p.value());
  for (const auto& b : model_.module().named_buffers()) s.tensors["model/" + b.key()] = detail::host_copy(b.value());
  for (const auto& p : policies_) {
    StateDict state;
    p->save_state(state);
    for (auto& [key, value] : state) s.tensors["policy/" + p->name() + "/" + key] = detail::host_copy(value);
  }
  for (auto& [name, gen] : generators()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.tensors[name] = gen.get_state();
  }
  // A deep copy of the optimizer's state (memcpy speed) when its type is known, serialized later
  // by the writer; otherwise serialized now. Either way safe from the next in-place update.
  s.optimizer_copy = detail::host_copy_of_optimizer(*optimizer_);
  if (!s.optimizer_copy) s.optimizer = serialize_optimizer(*optimizer_);
  s.state = state_;
  s.data = train_loader_.position();
  s.world_size = train_loader_.options().num_replicas();
  return s;
}

void Trainer::restore(const TrainingSnapshot& s) {
  if (s.world_size != train_loader_.options().num_replicas()) {
    throw TrainingError(c10::str("the checkpoint was written by a run with world size ", s.world_size,
                                 " and this run has ", train_loader_.options().num_replicas(),
                                 ": resuming on another world size would change the data order; start a new run"));
  }
  torch::NoGradGuard no_grad;
  auto load_into = [&](const std::string& name, torch::Tensor& target) {
    auto it = s.tensors.find("model/" + name);
    if (it == s.tensors.end()) throw TrainingError("the checkpoint has no tensor for '" + name + "'");
    if (it->second.sizes() != target.sizes()) {
      throw TrainingError(c10::str("'", name, "' has shape ", target.sizes(), " in this model but ", it->second.sizes(),
                                   " in the checkpoint: the model changed since it was written"));
    }
    target.copy_(it->second);  // converts a half-precision stored copy back to the model's dtype
  };
  for (auto& p : model_.module().named_parameters()) load_into(p.key(), p.value());
  for (auto& b : model_.module().named_buffers()) load_into(b.key(), b.value());

  std::istringstream bytes(s.optimizer_bytes());
  torch::serialize::InputArchive archive;
  archive.load_from(bytes, device_);
  optimizer_->load(archive);

  for (auto& p : policies_) {
    StateDict state;
    const std::string prefix = "policy/" + p->name() + "/";
    for (auto it = s.tensors.lower_bound(prefix); it != s.tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      state[it->first.substr(prefix.size())] = it->second;
    }
    p->load_state(state);
  }
  for (auto& [name, gen] : generators()) {
    auto it = s.tensors.find(name);
    if (it == s.tensors.end()) continue;  // e.g. written on a machine without this GPU
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(it->second);
  }

  state_ = s.state;
  state_.stop_reason.reset();  // a run stopped by preemption goes on
  // A snapshot from the end of an epoch continues with the next one.
  DataPosition position = s.data;
  // A run that halved its micro-batch after running out of memory goes on with the halved one.
  const int64_t configured = train_loader_.options().batch_size();
  if (position.batch_size > 0 && position.batch_size != configured) {
    log::warn(c10::str("resuming with the micro-batch of ", position.batch_size, " the checkpointed run used (configured: ",
                       configured, ")"));
    change_micro_batch(position.batch_size);
  }
  if (position.batch_index >= train_loader_.batches_per_epoch()) {
    position = {position.epoch + 1, 0, position.seed, position.batch_size};
    state_.epoch = position.epoch;
  }
  train_loader_.restore(position);
  apply_lr_schedule();
  log::info(c10::str("resumed at step ", state_.step, ", epoch ", state_.epoch, ", batch ", position.batch_index));
}

}  // namespace frugal
