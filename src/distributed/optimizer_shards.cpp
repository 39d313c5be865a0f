#include "frugal/distributed/optimizer_shards.hpp"

#include <c10/util/StringUtil.h>
#include <torch/optim/lbfgs.h>
#include <torch/torch.h>

#include <deque>
#include <set>
#include <unordered_map>

#include "base/host_memory.hpp"
#include "distributed/detail/bucket_layout.hpp"
#include "frugal/errors.hpp"
#include "frugal/optim/state_quantization.hpp"
#include "optim/portable_state.hpp"

namespace frugal {

namespace {

// A piece of a parameter this rank's optimizer updates.
struct Piece {
  detail::ShardPiece where;
  int64_t group = 0, index = 0;  // its place in the optimizer
  torch::Tensor tensor;          // a flat view of the parameter's range, or a copy when it is not contiguous
  bool copy = false;
};

torch::Tensor flat_range(const torch::Tensor& p, int64_t begin, int64_t numel) {
  return p.detach().reshape({-1}).narrow(0, begin, numel);
}

}  // namespace

struct OptimizerShards::Impl {
  int64_t world_size, rank, cap_bytes;
  int64_t alignment = 1;
  bool attached = false;
  std::vector<torch::Tensor> trained;
  std::vector<std::string> names;  // of `trained`
  std::vector<detail::Bucket> layout;
  std::vector<Piece> pieces;  // this rank's, in bucket order
  std::vector<detail::ShardPiece> passive;  // this rank's ranges of trained tensors the optimizer does not update
  std::shared_ptr<ShardingInfo> info;
  detail::GroupSlots whole_slots;  // the optimizer as the factory built it
  detail::GroupSlots piece_slots;  // as this rank's optimizer holds it now
};

OptimizerShards::OptimizerShards(int64_t world_size, int64_t rank, int64_t bucket_cap_bytes) : impl_(std::make_unique<Impl>()) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw OptionError("rank", c10::str("OptimizerShards: rank ", rank, " is not in a world of ", world_size));
  }
  if (bucket_cap_bytes < 1) throw OptionError("bucket_cap_mb", c10::str("bucket_cap_mb must be > 0, got ", bucket_cap_bytes, " bytes"));
  impl_->world_size = world_size;
  impl_->rank = rank;
  impl_->cap_bytes = bucket_cap_bytes;
}

OptimizerShards::~OptimizerShards() = default;

bool OptimizerShards::attached() const { return impl_->attached; }
int64_t OptimizerShards::world_size() const { return impl_->world_size; }
int64_t OptimizerShards::rank() const { return impl_->rank; }
int64_t OptimizerShards::bucket_cap_bytes() const { return impl_->cap_bytes; }
int64_t OptimizerShards::element_alignment() const { return impl_->alignment; }
const std::vector<torch::Tensor>& OptimizerShards::trained() const { return impl_->trained; }

int64_t OptimizerShards::owned_elements() const {
  int64_t n = 0;
  for (const auto& p : impl_->pieces) n += p.where.numel;
  return n;
}

int64_t OptimizerShards::total_elements() const {
  int64_t n = 0;
  for (const auto& p : impl_->trained) n += p.numel();
  return n;
}

void OptimizerShards::attach(torch::nn::Module& module, torch::optim::Optimizer& optimizer) {
  Impl& s = *impl_;
  if (s.attached) throw TrainingError("OptimizerShards::attach: already attached to an optimizer");
  if (dynamic_cast<torch::optim::LBFGS*>(&optimizer)) {
    throw TrainingError("sharded optimizer state: LBFGS evaluates the whole model in its step and cannot be sharded; use distributed.shard=off");
  }
  if (!optimizer.state().empty()) {
    throw TrainingError("sharded optimizer state: the optimizer already holds state (shard it before the first step)");
  }
  s.whole_slots = detail::whole_parameter_slots(optimizer, module);
  std::unordered_map<const c10::TensorImpl*, std::pair<int64_t, std::string>> group_of;  // optimized tensor -> (group, name)
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& params = optimizer.param_groups()[g].params();
    for (size_t j = 0; j < params.size(); ++j) group_of[params[j].unsafeGetTensorImpl()] = {static_cast<int64_t>(g), s.whole_slots[g][j].name};
  }
  for (const auto& p : module.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    s.trained.push_back(p.value());
    s.names.push_back(p.key());
  }
  auto* quantizing = quantized_states_of(optimizer);
  s.alignment = quantizing ? quantizing->state_alignment() : 1;
  s.layout = detail::bucket_layout(s.trained, s.cap_bytes, s.world_size, s.alignment);

  // Every rank's pieces, numbered within each optimizer group in bucket order. Trained tensors
  // the optimizer does not update (left out by the program) have no piece.
  s.info = std::make_shared<ShardingInfo>();
  s.info->world_size = s.world_size;
  for (size_t i = 0; i < s.trained.size(); ++i) {
    if (group_of.count(s.trained[i].unsafeGetTensorImpl())) s.info->shapes[s.names[i]] = s.trained[i].sizes().vec();
  }
  const size_t groups = optimizer.param_groups().size();
  std::vector<Piece> mine;
  for (int64_t r = 0; r < s.world_size; ++r) {
    std::vector<int64_t> next_index(groups, 0);
    auto& table = s.info->pieces.emplace_back();
    for (const auto& where : detail::pieces_of_rank(s.layout, r)) {
      const auto it = group_of.find(s.trained[where.param].unsafeGetTensorImpl());
      if (it == group_of.end()) {
        if (r == s.rank) s.passive.push_back(where);
        continue;
      }
      const int64_t group = it->second.first;
      const int64_t index = next_index[static_cast<size_t>(group)]++;
      table.push_back({s.names[where.param], where.begin, where.numel, group, index});
      if (r == s.rank) mine.push_back({where, group, index, torch::Tensor(), false});
    }
  }
  // This rank's optimizer: the same groups and options, over its pieces.
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> group_tensors(groups);
  s.piece_slots.assign(groups, {});
  for (auto& piece : mine) {
    const torch::Tensor& p = s.trained[piece.where.param];
    piece.copy = !p.is_contiguous();
    piece.tensor = piece.copy ? flat_range(p, piece.where.begin, piece.where.numel).clone()
                              : p.detach().view({-1}).narrow(0, piece.where.begin, piece.where.numel);
    group_tensors[static_cast<size_t>(piece.group)].push_back(piece.tensor);
    if (quantizing) quantizing->set_whole_numel(piece.tensor, p.numel());  // 8-bit or not as unsharded
    s.piece_slots[static_cast<size_t>(piece.group)].push_back(
        {s.names[piece.where.param], piece.where.begin, piece.where.numel, {piece.where.numel}});
  }
  for (size_t g = 0; g < groups; ++g) optimizer.param_groups()[g].params() = std::move(group_tensors[g]);
  s.pieces = std::move(mine);
  s.attached = true;
}

void OptimizerShards::take_gradients(const std::vector<torch::Tensor>& reduced, bool chunks) {
  Impl& s = *impl_;
  torch::NoGradGuard no_grad;
  if (reduced.size() != s.layout.size()) {
    throw TrainingError(c10::str("OptimizerShards: ", reduced.size(), " reduced buckets for a layout of ", s.layout.size()));
  }
  for (auto& piece : s.pieces) {
    const detail::Bucket& bucket = s.layout[piece.where.bucket];
    const int64_t at = piece.where.chunk_offset + (chunks ? 0 : s.rank * bucket.chunk());
    // An alias of the range, not an autograd view: Optimizer::zero_grad detaches gradients in
    // place, which autograd forbids on views.
    const torch::Tensor& source = reduced[piece.where.bucket];
    torch::Tensor grad = torch::empty({0}, source.options());
    grad.set_(source.storage(), source.storage_offset() + at, {piece.where.numel}, {1});
    piece.tensor.mutable_grad() = grad;
  }
}

void OptimizerShards::refresh_pieces() {
  torch::NoGradGuard no_grad;
  for (auto& piece : impl_->pieces) {
    if (piece.copy) piece.tensor.copy_(flat_range(impl_->trained[piece.where.param], piece.where.begin, piece.where.numel));
  }
}

void OptimizerShards::gather_parameters(Communicator& communicator) {
  Impl& s = *impl_;
  torch::NoGradGuard no_grad;
  struct InFlight {
    size_t bucket;
    torch::Tensor whole;
    std::unique_ptr<PendingCollective> pending;
  };
  auto unpack = [&](InFlight& f) {
    f.pending->wait();
    for (const auto& e : s.layout[f.bucket].entries) {
      torch::Tensor p = s.trained[e.param].detach();
      p.copy_(f.whole.narrow(0, e.offset, e.numel).view(p.sizes()));
    }
  };
  // Two buckets in flight at a time: communication overlaps the copies, and only two whole
  // buckets are held at once.
  std::deque<InFlight> in_flight;
  size_t next_piece = 0;
  for (size_t b = 0; b < s.layout.size(); ++b) {
    const detail::Bucket& bucket = s.layout[b];
    const auto options = s.trained[bucket.entries.front().param].options();
    torch::Tensor mine = torch::zeros({bucket.chunk()}, options);
    for (; next_piece < s.pieces.size() && s.pieces[next_piece].where.bucket == b; ++next_piece) {
      const Piece& piece = s.pieces[next_piece];
      mine.narrow(0, piece.where.chunk_offset, piece.where.numel).copy_(piece.tensor);
    }
    // Ranges the optimizer does not update still travel: their owner sends its values.
    for (const auto& where : s.passive) {
      if (where.bucket == b) mine.narrow(0, where.chunk_offset, where.numel).copy_(flat_range(s.trained[where.param], where.begin, where.numel));
    }
    torch::Tensor whole = torch::empty({bucket.padded}, options);
    in_flight.push_back({b, whole, communicator.start_all_gather(mine, whole)});
    if (in_flight.size() > 2) {
      unpack(in_flight.front());
      in_flight.pop_front();
    }
  }
  for (auto& f : in_flight) unpack(f);
}

std::shared_ptr<const ShardingInfo> OptimizerShards::info() const { return impl_->info; }

std::vector<torch::Tensor> OptimizerShards::weight_pieces() const {
  std::vector<torch::Tensor> out;
  torch::NoGradGuard no_grad;
  for (const auto& piece : impl_->pieces) {
    out.push_back(flat_range(impl_->trained[piece.where.param], piece.where.begin, piece.where.numel));
  }
  return out;
}

void OptimizerShards::load(const ShardSource* sharded, const std::string& whole_optimizer, torch::optim::Optimizer& optimizer,
                           Communicator& communicator, const torch::Device& device) {
  Impl& s = *impl_;
  if (!s.attached) throw TrainingError("OptimizerShards::load before attach");
  detail::PortableOptimizerState state;
  torch::NoGradGuard no_grad;
  if (!sharded) {
    // Unsharded: the Trainer has put the whole weights in place; the optimizer is whole.
    state.add_serialized(whole_optimizer, s.whole_slots, "the checkpoint's optimizer.pt");
    state.load_into(optimizer, s.piece_slots, device, "the checkpoint's optimizer.pt");
    refresh_pieces();
    return;
  }
  const ShardSource& source = *sharded;
  const size_t groups = optimizer.param_groups().size();
  std::vector<int64_t> covered(s.pieces.size(), 0);
  for (const int64_t q : overlapping_shards(source.info, &s.info->pieces.at(static_cast<size_t>(s.rank)))) {  // only those
    const auto& table = source.info.pieces[static_cast<size_t>(q)];
    const std::string where = c10::str(source.location, " (shard ", q, " of ", source.info.world_size, ")");
    const ShardContents contents = read_shard(source, q);
    for (size_t k = 0; k < table.size(); ++k) {
      const ShardPieceInfo& from = table[k];
      for (size_t m = 0; m < s.pieces.size(); ++m) {
        Piece& to = s.pieces[m];
        if (s.names[to.where.param] != from.param) continue;
        const int64_t begin = std::max(to.where.begin, from.begin), end = std::min(to.where.begin + to.where.numel, from.begin + from.numel);
        if (begin >= end) continue;
        to.tensor.narrow(0, begin - to.where.begin, end - begin).copy_(contents.weights[k].narrow(0, begin - from.begin, end - begin));
        covered[m] += end - begin;
      }
    }
    state.add_serialized(contents.optimizer, detail::slots_of(table, groups), where);
  }
  for (size_t m = 0; m < s.pieces.size(); ++m) {
    if (covered[m] != s.pieces[m].where.numel) {
      throw CheckpointError(c10::str(source.location, ": no shard holds all of elements [", s.pieces[m].where.begin, ", ",
                                     s.pieces[m].where.begin + s.pieces[m].where.numel, ") of '", s.names[s.pieces[m].where.param], "'"));
    }
  }
  state.load_into(optimizer, s.piece_slots, device, source.location);
  // Copies of non-contiguous parameters hold the loaded values: the gather writes them back.
  gather_parameters(communicator);
}

void load_sharded_into_whole(const ShardSource& source, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                             const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const detail::GroupSlots slots = detail::whole_parameter_slots(optimizer, module);
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : module.named_parameters()) params.emplace(p.key(), p.value());
  std::map<std::string, torch::Tensor> flat;  // assembled in host memory, then copied in
  std::map<std::string, int64_t> covered;
  detail::PortableOptimizerState state;
  for (int64_t q = 0; q < source.info.world_size; ++q) {
    const auto& table = source.info.pieces[static_cast<size_t>(q)];
    const std::string where = c10::str(source.location, " (shard ", q, " of ", source.info.world_size, ")");
    const ShardContents contents = read_shard(source, q);
    for (size_t k = 0; k < table.size(); ++k) {
      const ShardPieceInfo& piece = table[k];
      const auto it = params.find(piece.param);
      if (it == params.end()) throw CheckpointError(c10::str(where, ": '", piece.param, "' is not a parameter of this model"));
      if (piece.begin < 0 || piece.begin + piece.numel > it->second.numel()) {
        throw CheckpointError(c10::str(where, ": elements [", piece.begin, ", ", piece.begin + piece.numel, ") of '", piece.param,
                                       "' do not fit its ", it->second.numel(), " elements: the model changed"));
      }
      auto [slot, fresh] = flat.try_emplace(piece.param);
      if (fresh) slot->second = torch::empty({it->second.numel()}, contents.weights[k].options());
      slot->second.narrow(0, piece.begin, piece.numel).copy_(contents.weights[k]);
      covered[piece.param] += piece.numel;
    }
    state.add_serialized(contents.optimizer, detail::slots_of(table, optimizer.param_groups().size()), where);
  }
  for (const auto& [name, values] : flat) {
    torch::Tensor& p = params.at(name);
    if (covered[name] != p.numel()) {
      throw CheckpointError(c10::str(source.location, ": the shards hold ", covered[name], " of the ", p.numel(), " elements of '", name, "'"));
    }
    p.copy_(values.view(p.sizes()));
  }
  state.load_into(optimizer, slots, device, source.location);
}

}  // namespace frugal
