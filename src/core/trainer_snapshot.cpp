// Trainer::snapshot and Trainer::restore: what a checkpoint holds, and putting it back.
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <set>
#include <sstream>

#include "base/host_memory.hpp"
#include "detail/optimizer_copy.hpp"
#include "optim/optimizer_archive.hpp"
#include "optim/optimizer_loading.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/base/communicator.hpp"
#include "frugal/distributed/optimizer_shards.hpp"
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

std::string serialize_optimizer(torch::optim::Optimizer& optimizer) { return detail::optimizer_archive_bytes(optimizer); }

// The parameters whose weights a sharded snapshot keeps in its shards rather than in "model/".
const ShardingInfo* sharding_of(const TrainingSnapshot& s) {
  if (s.shards) return &s.shards->info;
  return s.sharding.get();
}

// Examples of the epoch already read, in this run's batches: the epoch's order is the same for
// any world size, and a global batch is a contiguous run of it (rank r reads every world-th
// example), so a run on another world size continues where the old one stopped.
DataPosition position_for_world(const DataPosition& saved, int64_t saved_world, int64_t world, int64_t batch_size) {
  const int64_t saved_batch = saved.batch_size > 0 ? saved.batch_size : batch_size;
  const int64_t read = saved.batch_index * saved_batch * saved_world;
  const int64_t global_batch = batch_size * world;
  if (read % global_batch != 0) {
    log::warn(c10::str("resuming on ", world, " ranks from a checkpoint of ", saved_world, ": the ", read,
                       " examples already read in epoch ", saved.epoch, " are not a whole number of global batches of ", global_batch,
                       "; the last ", read % global_batch, " of them are read again"));
  }
  return {saved.epoch, read / global_batch, saved.seed, batch_size};
}

// The checkpoint's RNG streams go back into this machine's generators. A checkpoint written on
// another device type (the first epoch on a CPU machine, the rest on a GPU one) lacks some:
// those generators are seeded from the step and the stream's name, so that every resume of the
// same checkpoint draws the same numbers; the checkpoint's streams of devices this machine
// lacks stay unused. The log says both.
void restore_generators(const TrainingSnapshot& s) {
  std::set<std::string> used;
  for (auto& [name, gen] : generators()) {
    const auto it = s.tensors.find(name);
    std::lock_guard<std::mutex> lock(gen.mutex());
    if (it != s.tensors.end()) {
      gen.set_state(it->second);
      used.insert(name);
      continue;
    }
    uint64_t seed = 1469598103934665603ull ^ static_cast<uint64_t>(s.state.step);  // FNV-1a over the name, from the step
    for (const char c : name) seed = (seed ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    gen.set_current_seed(seed);
    log::info(c10::str("the checkpoint has no ", name, " state (written on another device type): that generator is seeded with ", seed,
                       ", from the step"));
  }
  for (auto it = s.tensors.lower_bound("rng/"); it != s.tensors.end() && it->first.rfind("rng/", 0) == 0; ++it) {
    if (!used.count(it->first)) log::info("the checkpoint's " + it->first + " state has no device here: unused");
  }
}

}  // namespace

std::string TrainingSnapshot::optimizer_bytes() const {
  return optimizer.empty() && optimizer_copy ? serialize_optimizer(*optimizer_copy) : optimizer;
}

void TrainingSnapshot::write_optimizer(const std::function<size_t(const void*, size_t)>& writer) const {
  if (optimizer.empty() && optimizer_copy) {
    detail::write_optimizer_archive(*optimizer_copy, writer);
  } else {
    writer(optimizer.data(), optimizer.size());
  }
}

TrainingSnapshot Trainer::snapshot() const { return std::move(*staged_snapshot()->finish()); }

std::shared_ptr<StagedSnapshot> Trainer::staged_snapshot() const {
  auto s = std::make_shared<TrainingSnapshot>();
  std::vector<torch::Tensor*> deferred;  // the large tensors, aliased now and copied by finish()
  torch::NoGradGuard no_grad;
  if (shards_) {  // this rank's pieces of the trained weights; the rest below
    s->sharding = shards_->info();
    s->shard_weights = shards_->weight_pieces();
    for (auto& piece : s->shard_weights) deferred.push_back(&piece);
    s->rank = rank();
  }
  for (const auto& p : model_.module().named_parameters()) {
    if (s->sharding && s->sharding->shapes.count(p.key())) continue;
    torch::Tensor& slot = s->tensors["model/" + p.key()];
    slot = p.value().detach();
    deferred.push_back(&slot);
  }
  // Copied now: buffers change in the forward pass (batch norm's running statistics), the rest is small.
  for (const auto& b : model_.module().named_buffers()) s->tensors["model/" + b.key()] = detail::host_copy(b.value());
  for (const auto& p : policies_) {
    StateDict state;
    p->save_state(state);
    for (auto& [key, value] : state) s->tensors["policy/" + p->name() + "/" + key] = detail::host_copy(value);
  }
  for (auto& [name, gen] : generators()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    s->tensors[name] = gen.get_state();
  }
  // The policies' standing decisions, only when taken (a checkpoint without them has none).
  if (standing_.lr_factor != 1.0) s->tensors["trainer/lr_factor"] = torch::tensor(standing_.lr_factor, torch::kDouble);
  if (standing_.precision) s->tensors["trainer/precision"] = torch::tensor(static_cast<int64_t>(*standing_.precision));
  // The optimizer's groups and options now, its state tensors with the weights, when its type is
  // known (serialized later by the writer); otherwise serialized now.
  s->optimizer_copy = detail::staged_copy_of_optimizer(*optimizer_, deferred);
  if (!s->optimizer_copy) s->optimizer = serialize_optimizer(*optimizer_);
  s->state = state_;
  s->data = train_loader_.position();
  s->world_size = train_loader_.options().num_replicas();
  return std::make_shared<StagedSnapshot>(std::move(s), std::move(deferred), copy_fence_);
}

void Trainer::restore_weights_and_optimizer(const TrainingSnapshot& s) {
  std::shared_ptr<const ShardSource> source = s.shards;
  if (!source && s.sharding) {  // a snapshot taken in memory: this rank's own shard, and no other
    auto own = std::make_shared<ShardSource>();
    own->info = *s.sharding;
    own->location = "an in-memory snapshot";
    own->read = [&s](int64_t q) {
      if (q != s.rank) throw CheckpointError(c10::str("an in-memory snapshot holds rank ", s.rank, "'s shard only, not rank ", q, "'s"));
      return ShardContents{s.shard_weights, s.optimizer_bytes()};
    };
    source = std::move(own);
  }
  if (shards_) {
    shards_->load(source.get(), source ? std::string() : s.optimizer_bytes(), *optimizer_, *communicator_, device_);
  } else if (source) {
    load_sharded_into_whole(*source, model_.module(), *optimizer_, device_);
  } else {
    detail::load_optimizer_state(*optimizer_, model_.module(), s.optimizer_bytes(), device_);
  }
}

void Trainer::restore(const TrainingSnapshot& s) {
  copy_fence_->wait();  // a staged snapshot may still be reading the weights
  torch::NoGradGuard no_grad;
  const ShardingInfo* sharding = sharding_of(s);
  auto load_into = [&](const std::string& name, torch::Tensor& target) {
    auto it = s.tensors.find("model/" + name);
    if (it == s.tensors.end()) {
      if (sharding) {
        const auto shape = sharding->shapes.find(name);
        if (shape != sharding->shapes.end()) {  // in the shards
          if (c10::IntArrayRef(shape->second) != target.sizes()) {
            throw TrainingError(c10::str("'", name, "' has shape ", target.sizes(), " in this model but ", c10::IntArrayRef(shape->second),
                                         " in the checkpoint: the model changed since it was written"));
          }
          return;
        }
      }
      throw TrainingError("the checkpoint has no tensor for '" + name + "'");
    }
    if (it->second.sizes() != target.sizes()) {
      throw TrainingError(c10::str("'", name, "' has shape ", target.sizes(), " in this model but ", it->second.sizes(),
                                   " in the checkpoint: the model changed since it was written"));
    }
    target.copy_(it->second);  // converts a half-precision stored copy back to the model's dtype
  };
  for (auto& p : model_.module().named_parameters()) load_into(p.key(), p.value());
  for (auto& b : model_.module().named_buffers()) load_into(b.key(), b.value());
  restore_weights_and_optimizer(s);

  for (auto& p : policies_) {
    StateDict state;
    const std::string prefix = "policy/" + p->name() + "/";
    for (auto it = s.tensors.lower_bound(prefix); it != s.tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      state[it->first.substr(prefix.size())] = it->second;
    }
    p->load_state(state);
  }
  restore_generators(s);

  standing_ = {};
  if (auto it = s.tensors.find("trainer/lr_factor"); it != s.tensors.end()) standing_.lr_factor = it->second.item<double>();
  if (auto it = s.tensors.find("trainer/precision"); it != s.tensors.end()) {
    const int64_t precision = it->second.item<int64_t>();
    if (precision < 0 || precision >= static_cast<int64_t>(names_of(Precision{}).size())) {
      throw CheckpointError(c10::str("trainer/precision is ", precision, ", which names no precision"));
    }
    standing_.precision = static_cast<Precision>(precision);
    standing_.precision_reason = "asked for before the checkpoint was written";
  }
  state_ = s.state;
  state_.stop_reason.reset();  // a run stopped by preemption goes on
  // A snapshot from the end of an epoch continues with the next one.
  DataPosition position = s.data;
  const int64_t configured = train_loader_.options().batch_size();
  const int64_t world = train_loader_.options().num_replicas();
  if (s.world_size != world) {
    log::info(c10::str("resuming on ", world, " ranks from a checkpoint written by ", s.world_size, ", with micro-batches of ", configured));
    position = position_for_world(position, s.world_size, world, configured);
  } else if (position.batch_size > 0 && position.batch_size != configured) {
    // A run that halved its micro-batch after running out of memory goes on with the halved one.
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
