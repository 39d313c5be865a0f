#pragma once
// The decode loop shared by datasets of raw samples (tar shards, image folders): read and decode
// each index, and under on_corrupt = skip leave a corrupt sample out of the batch, counted.

#include <atomic>
#include <functional>
#include <vector>

#include "frugal/data/sharded_dataset.hpp"

namespace frugal::detail {

class BatchBuffers;

/// collate() into `buffers` (null: fresh tensors), page-locked when `pinned`.
Batch collate_into(const std::vector<Batch>& examples, BatchBuffers* buffers, bool pinned);

Batch decode_samples(const std::vector<int64_t>& indices, const std::function<Sample(int64_t)>& read,
                     const SampleDecoder& decode, const FetchContext& context, OnCorrupt on_corrupt,
                     std::atomic<int64_t>& skipped);

}  // namespace frugal::detail
