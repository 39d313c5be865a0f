#include "frugal/data/batch.hpp"

namespace frugal {

namespace {

template <typename F>
Batch map_tensors(const Batch& batch, F f) {
  auto apply = [&](const torch::Tensor& t) { return t.defined() ? f(t) : t; };
  Batch out{apply(batch.input), apply(batch.target), {}};
  for (const auto& [name, tensor] : batch.extra) out.extra.emplace(name, apply(tensor));
  return out;
}

}  // namespace

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  return map_tensors(*this, [&](const torch::Tensor& t) { return t.to(device, non_blocking); });
}

Batch Batch::pin_memory() const {
  // Only host tensors can be pinned; a dataset may already produce device tensors (synthetic data).
  return map_tensors(*this, [](const torch::Tensor& t) { return !t.device().is_cpu() || t.is_pinned() ? t : t.pin_memory(); });
}

}  // namespace frugal
