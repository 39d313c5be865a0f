#pragma once
// The automatic batch size for a Trainer that has not started: probes the Trainer's own model
// (on its device, with a fresh optimizer from its factory, under the configured autocast) with
// worst-case batches from `probe`, then puts the weights, buffers and random state back as they
// were, and sets the Trainer's micro-batch to the answer (see batch_size_finder.hpp).
// add_policies() calls it when [auto_batch] enabled = true and the program gives a probe.

#include <functional>
#include <memory>
#include <string>

#include "frugal/data/batch.hpp"
#include "frugal/data/dataset.hpp"
#include "frugal/policies/mixed_precision.hpp"
#include "frugal/tooling/batch_size_finder.hpp"

namespace frugal {

class Trainer;

/// A batch of `n` samples of the largest shape the data can produce (longest sequence, largest
/// image), on the CPU, and a short description of that shape (part of the cache key).
struct ProbeBatch {
  std::function<Batch(int64_t n)> make;
  std::string shape;
};

/// A probe of `n` copies of example `index` of `data`: right for data of one shape (fixed
/// crops, sequences padded to a fixed length); pass the largest example otherwise.
ProbeBatch repeat_example(std::shared_ptr<const Dataset> data, int64_t index, std::string shape);

BatchSizeSearch choose_batch_size(Trainer& trainer, const ProbeBatch& probe, const MixedPrecisionOptions& precision,
                                  const BatchSizeFinderOptions& options);

/// With the micro-batch changed to `batch_size`, the accumulation steps that keep the effective
/// batch (`batch_size x steps` per rank) exactly: the largest divisor of the effective batch not
/// above `batch_size` and its steps. {batch_size, 1} when the effective batch is smaller.
std::pair<int64_t, int64_t> keep_effective_batch(int64_t effective_per_rank, int64_t batch_size);

}  // namespace frugal
