#pragma once
// Where each parameter's gradient sits in the buckets that data parallelism reduces, and, with
// sharding, which part of each bucket every rank owns. Parameters go into buckets in reverse order
// (roughly the order backward produces their gradients), split by device, dtype and size. With
// sharding each bucket is padded to a multiple of the world size and cut into equal chunks, one a
// rank: rank r owns elements [r * chunk, (r + 1) * chunk) of every bucket, i.e. contiguous ranges
// of the parameters in it (their elements in row-major order). The layout depends only on the
// parameters' sizes, dtypes and devices, the bucket cap and the world size, so any rank (or a
// checkpoint reader) can compute every rank's share.

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace frugal::detail {

struct BucketEntry {
  size_t param;    // index into the parameter list
  int64_t offset;  // first element in the bucket
  int64_t numel;
};

struct Bucket {
  std::vector<BucketEntry> entries;  // in bucket order
  int64_t numel = 0;                 // end of the last entry (the sum of the entries, unless aligned)
  int64_t padded = 0;                // numel rounded up to a multiple of the world size (times the alignment)
  int64_t chunk() const;             // padded / world size: one rank's share
  int64_t world_size = 1;
};

/// A contiguous range of one parameter that one rank owns.
struct ShardPiece {
  size_t param;
  int64_t begin;         // first element of the parameter (row-major)
  int64_t numel;
  size_t bucket;
  int64_t chunk_offset;  // where it starts in the owner's chunk of the bucket
};

/// Buckets of at most `cap_bytes` (a single larger parameter gets a bucket of its own). With
/// `alignment` > 1 every parameter starts at a multiple of it in its bucket and every rank's
/// chunk is a multiple of it (8-bit optimizer states: a piece's blocks are the parameter's);
/// the gaps hold zeros.
std::vector<Bucket> bucket_layout(const std::vector<torch::Tensor>& params, int64_t cap_bytes, int64_t world_size,
                                  int64_t alignment = 1);

/// The pieces `rank` owns, in bucket order.
std::vector<ShardPiece> pieces_of_rank(const std::vector<Bucket>& buckets, int64_t rank);

}  // namespace frugal::detail
