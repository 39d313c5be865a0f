#include "frugal/data/batch.hpp"

namespace frugal {

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  auto move = [&](const torch::Tensor& t) {
    return t.defined() ? t.to(device, non_blocking) : t;
  };
  Batch out{move(input), move(target), {}};
  for (const auto& [name, tensor] : extra) out.extra.emplace(name, move(tensor));
  return out;
}

}  // namespace frugal
