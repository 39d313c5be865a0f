#pragma once
// Copies to host memory for snapshots and checkpoints: tensors safe from later in-place updates
// on the device, and an archive's bytes appended straight into one string (no stream copies).

#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <string>

namespace frugal::detail {

/// A CPU copy of `t` that shares no storage with it (undefined stays undefined).
torch::Tensor host_copy(const torch::Tensor& t);
std::string archive_bytes(torch::serialize::OutputArchive& archive);

}  // namespace frugal::detail
