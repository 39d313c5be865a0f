#include "frugal/data/dataset.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "frugal/errors.hpp"

namespace frugal {

Batch Dataset::fetch(const std::vector<int64_t>& indices, const FetchContext& /*context*/) const {
  return get_batch(indices);
}

std::vector<int64_t> Dataset::shuffled_order(int64_t seed, int64_t epoch) const {
  // A generator of our own, seeded from (seed, epoch): the order never depends on how much of
  // the global RNG the model used, and is the same on every replica.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed) * 1000003ULL +
                                                      static_cast<uint64_t>(epoch));
  const int64_t n = size();
  auto perm = torch::randperm(n, gen, torch::kLong);
  return std::vector<int64_t>(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + n);
}

TensorDataset::TensorDataset(torch::Tensor inputs, torch::Tensor targets)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  if (!inputs_.defined() || inputs_.dim() == 0) {
    throw OptionError("inputs", "TensorDataset: inputs must have a first (example) dimension");
  }
  if (targets_.defined() && (targets_.dim() == 0 || targets_.size(0) != inputs_.size(0))) {
    throw OptionError("targets", c10::str("TensorDataset: targets hold ",
                                          targets_.dim() ? targets_.size(0) : 0,
                                          " examples but inputs hold ", inputs_.size(0)));
  }
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  auto index = torch::tensor(indices, torch::kLong);
  Batch batch;
  batch.input = inputs_.index_select(0, index);
  if (targets_.defined()) batch.target = targets_.index_select(0, index);
  return batch;
}

}  // namespace frugal
