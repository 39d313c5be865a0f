#include "frugal/data/dataset.hpp"

#include <c10/util/StringUtil.h>

#include "frugal/errors.hpp"

namespace frugal {

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
