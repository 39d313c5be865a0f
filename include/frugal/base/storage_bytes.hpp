#pragma once
// Memory held by tensors, counted as their storages: views of one storage count once.

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace frugal {

/// Bytes of the distinct storages behind `tensors` (undefined tensors count nothing).
int64_t storage_bytes(const std::vector<torch::Tensor>& tensors);

}  // namespace frugal
