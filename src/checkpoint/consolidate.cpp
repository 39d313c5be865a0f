#include "frugal/checkpoint/consolidate.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <map>

namespace frugal {

std::vector<std::pair<std::string, torch::Tensor>> consolidated_weights(const CheckpointStore& store, const CheckpointInfo& info) {
  const TrainingSnapshot snapshot = store.read(info);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [key, tensor] : snapshot.tensors) {
    if (key.rfind("model/", 0) == 0) out.emplace_back(key.substr(6), tensor);
  }
  if (!snapshot.shards) return out;
  const ShardSource& source = *snapshot.shards;
  std::map<std::string, torch::Tensor> flat;
  std::map<std::string, int64_t> covered;
  for (int64_t q = 0; q < source.info.world_size; ++q) {
    const auto& table = source.info.pieces[static_cast<size_t>(q)];
    const ShardContents contents = read_shard(source, q);
    for (size_t k = 0; k < table.size(); ++k) {
      const ShardPieceInfo& piece = table[k];
      const auto shape = source.info.shapes.find(piece.param);
      if (shape == source.info.shapes.end()) throw CheckpointError(source.location + ": no shape for '" + piece.param + "'");
      const int64_t numel = c10::multiply_integers(shape->second);
      if (piece.begin < 0 || piece.numel != contents.weights[k].numel() || piece.begin + piece.numel > numel) {
        throw CheckpointError(c10::str(source.location, ": shard ", q, "'s piece of '", piece.param, "' does not fit its shape"));
      }
      auto [it, fresh] = flat.try_emplace(piece.param);
      if (fresh) it->second = torch::empty({numel}, contents.weights[k].options());
      it->second.narrow(0, piece.begin, piece.numel).copy_(contents.weights[k]);
      covered[piece.param] += piece.numel;
    }
  }
  for (auto& [name, values] : flat) {
    const auto& shape = source.info.shapes.at(name);
    if (covered[name] != values.numel()) {
      throw CheckpointError(c10::str(source.location, ": the shards hold ", covered[name], " of the ", values.numel(), " elements of '",
                                     name, "'"));
    }
    out.emplace_back(name, values.view(shape));
  }
  return out;
}

}  // namespace frugal
