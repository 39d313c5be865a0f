#include "reused_grad_embedding.hpp"

#include <torch/torch.h>

namespace frugal::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ReusedGradEmbedding : public torch::autograd::Function<ReusedGradEmbedding> {
 public:
  // The autograd context keeps IValues: the storage travels in a capsule.
  struct StorageHolder : torch::CustomClassHolder {
    explicit StorageHolder(std::shared_ptr<GradStorage> s) : storage(std::move(s)) {}
    std::shared_ptr<GradStorage> storage;
  };

  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& weight, const torch::Tensor& ids, int64_t padding_idx,
                               const std::shared_ptr<GradStorage>& storage) {
    ctx->save_for_backward({ids});
    ctx->saved_data["padding_idx"] = padding_idx;
    ctx->saved_data["rows"] = weight.size(0);
    ctx->saved_data["storage"] = c10::IValue::make_capsule(c10::make_intrusive<StorageHolder>(storage));
    return at::embedding(weight, ids, padding_idx);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor ids = ctx->get_saved_variables()[0];
    const int64_t padding_idx = ctx->saved_data["padding_idx"].toInt(), rows = ctx->saved_data["rows"].toInt();
    const auto holder = c10::static_intrusive_pointer_cast<StorageHolder>(ctx->saved_data["storage"].toCapsule());
    const torch::Tensor grad = grads[0].contiguous();
    const int64_t dim = grad.size(-1);
    torch::Tensor grad_weight = holder->storage->zeros({rows, dim}, grad.options());
    grad_weight.index_add_(0, ids.reshape(-1), grad.view({-1, dim}));
    if (padding_idx >= 0) grad_weight[padding_idx].zero_();
    return {grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

};

}  // namespace

torch::Tensor GradStorage::zeros(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  const auto bytes = static_cast<size_t>(c10::multiply_integers(sizes)) * options.dtype().itemsize();
  const bool reusable = storage_ && storage_.use_count() == 1 && storage_.nbytes() >= bytes && storage_.device() == options.device();
  if (!reusable) {
    torch::Tensor fresh = torch::zeros(sizes, options);
    storage_ = fresh.storage();
    return fresh;
  }
  return torch::empty({0}, options).set_(storage_, 0, sizes, c10::contiguous_strides(sizes)).zero_();
}

torch::Tensor reused_grad_embedding(const torch::Tensor& weight, const torch::Tensor& ids, int64_t padding_idx,
                                    const std::shared_ptr<GradStorage>& storage) {
  return ReusedGradEmbedding::apply(weight, ids, padding_idx, storage);
}

}  // namespace frugal::detail
