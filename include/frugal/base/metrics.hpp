#pragma once
// Figures a run records: per-batch scalar tensors and the plain numbers they become.

#include <torch/types.h>

#include <map>
#include <string>

namespace frugal {

/// Per-batch validation metrics: scalar tensors, averaged over the validation set weighted by
/// batch size. Tensors (not doubles) so a GPU run syncs once per validation, not per batch.
using BatchMetrics = std::map<std::string, torch::Tensor>;
/// Metrics as recorded: plain numbers.
using Metrics = std::map<std::string, double>;

}  // namespace frugal
