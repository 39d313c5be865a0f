#include "frugal/base/snapshot.hpp"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <map>

#include "frugal/errors.hpp"

namespace frugal {

std::vector<int64_t> overlapping_shards(const ShardingInfo& written, const std::vector<ShardPieceInfo>* wanted) {
  std::map<std::string, std::vector<const ShardPieceInfo*>> by_param;
  if (wanted) {
    for (const auto& p : *wanted) by_param[p.param].push_back(&p);
  }
  std::vector<int64_t> ranks;
  for (int64_t q = 0; q < written.world_size; ++q) {
    const bool needed = !wanted || std::any_of(written.pieces[static_cast<size_t>(q)].begin(), written.pieces[static_cast<size_t>(q)].end(),
                                               [&](const ShardPieceInfo& p) {
                                                 const auto it = by_param.find(p.param);
                                                 if (it == by_param.end()) return false;
                                                 return std::any_of(it->second.begin(), it->second.end(), [&](const ShardPieceInfo* w) {
                                                   return std::max(p.begin, w->begin) < std::min(p.begin + p.numel, w->begin + w->numel);
                                                 });
                                               });
    if (needed) ranks.push_back(q);
  }
  return ranks;
}

ShardContents read_shard(const ShardSource& source, int64_t rank) {
  ShardContents contents = source.read(rank);
  const size_t pieces = source.info.pieces.at(static_cast<size_t>(rank)).size();
  if (contents.weights.size() != pieces) {
    throw CheckpointError(c10::str(source.location, " (shard ", rank, " of ", source.info.world_size, "): ", contents.weights.size(),
                                   " weight pieces but the layout lists ", pieces));
  }
  return contents;
}

}  // namespace frugal
