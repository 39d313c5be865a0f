#include "frugal/optim/fused_adamw.hpp"

#include <ATen/ops/_fused_adamw.h>
#include <torch/torch.h>

#include <map>
#include <tuple>

namespace frugal {

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    // One kernel call per (device, dtype, step count): the fused kernel wants them uniform.
    struct Batch {
      std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
    };
    // Key: device type, device index, dtype, step count.
    std::map<std::tuple<int, int, int, int64_t>, Batch> batches;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "FusedAdamW does not support sparse gradients");
      auto& slot = state()[p.unsafeGetTensorImpl()];
      if (!slot) {  // as torch::optim::AdamW initialises it
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      Batch& b = batches[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type()), s.step()}];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(s.exp_avg());
      b.exp_avg_sqs.push_back(s.exp_avg_sq());
      if (options.amsgrad()) b.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
    }
    for (auto& [key, b] : batches) {
      // The kernel reads each parameter's step count from a float tensor; all share this one.
      const torch::Tensor step_count = torch::full({}, static_cast<double>(std::get<3>(key)),
                                                   b.params.front().options().dtype(torch::kFloat32));
      const std::vector<torch::Tensor> steps(b.params.size(), step_count);
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, steps, options.lr(),
                        std::get<0>(options.betas()), std::get<1>(options.betas()), options.weight_decay(), options.eps(),
                        options.amsgrad(), /*maximize=*/false);
    }
  }
  return loss;
}

}  // namespace frugal
