#include "distributed/detail/bucket_layout.hpp"

#include <algorithm>
#include <map>
#include <string>

namespace frugal::detail {

int64_t Bucket::chunk() const { return padded / world_size; }

namespace {
int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }
}  // namespace

std::vector<Bucket> bucket_layout(const std::vector<torch::Tensor>& params, int64_t cap_bytes, int64_t world_size, int64_t alignment) {
  std::vector<Bucket> buckets;
  std::map<std::pair<std::string, c10::ScalarType>, size_t> open;  // (device, dtype) -> bucket being filled
  for (size_t i = params.size(); i-- > 0;) {
    const torch::Tensor& p = params[i];
    const auto key = std::make_pair(p.device().str(), p.scalar_type());
    const int64_t element = static_cast<int64_t>(p.element_size());
    auto it = open.find(key);
    if (it == open.end() ||
        (buckets[it->second].numel > 0 && (round_up(buckets[it->second].numel, alignment) + p.numel()) * element > cap_bytes)) {
      buckets.emplace_back();
      it = open.insert_or_assign(key, buckets.size() - 1).first;
    }
    Bucket& bucket = buckets[it->second];
    const int64_t offset = round_up(bucket.numel, alignment);
    bucket.entries.push_back({i, offset, p.numel()});
    bucket.numel = offset + p.numel();
  }
  for (auto& b : buckets) {
    b.world_size = world_size;
    b.padded = round_up(b.numel, world_size * alignment);
  }
  return buckets;
}

std::vector<ShardPiece> pieces_of_rank(const std::vector<Bucket>& buckets, int64_t rank) {
  std::vector<ShardPiece> pieces;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t chunk = buckets[b].chunk(), first = rank * chunk, last = first + chunk;
    for (const auto& e : buckets[b].entries) {
      const int64_t begin = std::max(first, e.offset), end = std::min(last, e.offset + e.numel);
      if (begin < end) pieces.push_back({e.param, begin - e.offset, end - begin, b, begin - first});
    }
  }
  return pieces;
}

}  // namespace frugal::detail
