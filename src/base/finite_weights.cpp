#include "base/finite_weights.hpp"

#include <torch/torch.h>

namespace frugal::detail {

std::optional<std::string> first_nonfinite(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> sums;
  std::vector<size_t> index;
  for (size_t i = 0; i < named.size(); ++i) {
    const torch::Tensor& t = named[i].second;
    if (!t.defined() || !(t.is_floating_point() || t.is_complex()) || t.numel() == 0) continue;
    const bool narrow = t.is_floating_point() && c10::elementSize(t.scalar_type()) < 4;  // fp16/bf16 sum in fp32
    sums.push_back((narrow ? t.sum(torch::kFloat) : t.sum()).isfinite());
    index.push_back(i);
  }
  if (sums.empty()) return std::nullopt;
  const torch::Tensor finite = torch::stack(sums).cpu();  // one device sync
  if (finite.all().item<bool>()) return std::nullopt;
  for (size_t k = 0; k < index.size(); ++k) {
    const torch::Tensor& t = named[index[k]].second;
    if (!finite[static_cast<int64_t>(k)].item<bool>() && !t.isfinite().all().item<bool>()) return named[index[k]].first;
  }
  return std::nullopt;  // overflowing sums of finite weights
}

std::string nonfinite_stop_message(const std::string& what, const std::string& at, const std::string& last_checkpoint) {
  return what + "; the run stops at " + at + "; " + last_checkpoint +
         ". Lower the learning rate, check the data, or use bf16/fp16 loss scaling; trainer.stop_on_nonfinite_loss=false trains on regardless";
}

}  // namespace frugal::detail
