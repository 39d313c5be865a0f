#include "frugal/core/model.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

namespace frugal {

torch::Tensor Model::loss(const Batch& batch) const {
  torch::Tensor loss = loss_(*module_, batch);
  if (!loss.defined() || loss.numel() != 1 || !loss.requires_grad()) {
    throw TrainingError(c10::str("the loss function must return a scalar tensor that requires grad; got ",
                                 loss.defined() ? c10::str(loss.sizes(), loss.requires_grad() ? "" : " without grad")
                                                : std::string("an undefined tensor")));
  }
  return loss;
}

BatchMetrics Model::metrics(const Batch& batch) const {
  if (!metrics_) throw TrainingError("frugal::Model: validation needs a metrics function");
  return metrics_(*module_, batch);
}

Model Model::copy_to(const torch::Device& device) const {
  if (!copy_) {
    throw TrainingError(c10::str(
        "cannot copy module '", module_->name(),
        "': derive it from torch::nn::Cloneable<Net> or give frugal::Model a factory that builds it"));
  }
  return Model(copy_(*module_, device), loss_, metrics_, copy_);
}

namespace detail {

void copy_state(const torch::nn::Module& from, torch::nn::Module& to, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  auto copy_all = [](const auto& source, auto target, const char* what) {
    for (const auto& item : source) {
      torch::Tensor* dst = target.find(item.key());
      if (dst == nullptr || dst->sizes() != item.value().sizes()) {
        throw TrainingError(c10::str("model factory built a different architecture: ", what, " '",
                                     item.key(), "' is missing or has another shape"));
      }
      dst->copy_(item.value());
    }
  };
  copy_all(from.named_parameters(), to.named_parameters(), "parameter");
  copy_all(from.named_buffers(), to.named_buffers(), "buffer");
  to.to(device);
}

}  // namespace detail
}  // namespace frugal
