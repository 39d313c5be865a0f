#pragma once
// The step and the load of FusedAdamW and FusedAdam, which differ only in their options, their
// fp32 state class, their fp32 fused kernel and where the weight decay goes.
#include <torch/torch.h>

#include <map>
#include <tuple>

#include "frugal/errors.hpp"
#include "frugal/optim/state_quantization.hpp"
#include "optim/quantized_param_state.hpp"
#include "optim/state_conversion.hpp"

namespace frugal::detail {

inline const std::vector<MomentSpec>& adam_moments() {
  static const std::vector<MomentSpec> specs{{"exp_avg", true}, {"exp_avg_sq", false}};
  return specs;
}

template <class Options>
AdamConstants adam_constants(const Options& o, int64_t step, bool decoupled) {
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  const double correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  return {static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(o.eps()),
          static_cast<float>(std::sqrt(correction2)),
          static_cast<float>(-o.lr() / correction1),
          decoupled ? static_cast<float>(1.0 - o.lr() * o.weight_decay()) : 1.0f,
          decoupled ? 0.0f : static_cast<float>(o.weight_decay())};
}

template <class Options>
void refuse_amsgrad_in_8bit(const torch::optim::Optimizer& optimizer, const QuantizedStateOptimizer& q) {
  if (q.state_quantization().bits() != 8) return;
  for (const auto& group : optimizer.param_groups()) {
    if (static_cast<const Options&>(group.options()).amsgrad()) {
      throw OptionError("state_bits", "state_bits=8 keeps Adam's two moments in 8 bits; amsgrad's third state is not supported with it");
    }
  }
}

/// One step. `fused_fp32` is ATen's _fused_adamw_ or _fused_adam_.
template <class Options, class State, class FusedKernel>
void adam_family_step(torch::optim::Optimizer& optimizer, const QuantizedStateOptimizer& q, bool decoupled, FusedKernel fused_fp32) {
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    // One fp32 kernel call per (device, dtype, step count): the fused kernel wants them uniform.
    struct Batch {
      std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
    };
    std::map<std::tuple<int, int, int, int64_t>, Batch> batches;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "Frugal's fused Adam does not support sparse gradients");
      auto& slot = optimizer.state()[p.unsafeGetTensorImpl()];
      if (q.quantized(p)) {
        if (!slot) slot = QuantizedParamState::zeros(p, adam_moments());
        auto* s = dynamic_cast<QuantizedParamState*>(slot.get());
        TORCH_CHECK(s, "an 8-bit parameter holds an fp32 optimizer state (changed state_bits without loading a checkpoint?)");
        s->step(s->step() + 1);
        adam_step_8bit(p, p.grad(), s->moment(0), s->moment(1), adam_constants(options, s->step(), decoupled));
        continue;
      }
      if (!slot) {  // as torch::optim::Adam(W) initialises it
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto* s = dynamic_cast<State*>(slot.get());
      TORCH_CHECK(s, "an fp32 parameter holds an 8-bit optimizer state (changed state_bits without loading a checkpoint?)");
      s->step(s->step() + 1);
      Batch& b = batches[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type()), s->step()}];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(s->exp_avg());
      b.exp_avg_sqs.push_back(s->exp_avg_sq());
      if (options.amsgrad()) b.max_exp_avg_sqs.push_back(s->max_exp_avg_sq());
    }
    for (auto& [key, b] : batches) {
      // The kernel reads each parameter's step count from a float tensor; all share this one.
      const torch::Tensor step_count = torch::full({}, static_cast<double>(std::get<3>(key)),
                                                   b.params.front().options().dtype(torch::kFloat32));
      const std::vector<torch::Tensor> steps(b.params.size(), step_count);
      fused_fp32(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, steps, options.lr(), std::get<0>(options.betas()),
                 std::get<1>(options.betas()), options.weight_decay(), options.eps(), options.amsgrad(), /*maximize=*/false);
    }
  }
}

template <class State>
Fp32StateForm adam_fp32_form() {
  return {[](const torch::optim::OptimizerParamState& s) -> std::optional<Fp32StateForm::Moments> {
            const auto* adam = dynamic_cast<const State*>(&s);
            if (!adam || !adam->exp_avg().defined() || !adam->exp_avg_sq().defined()) return std::nullopt;
            return Fp32StateForm::Moments{adam->step(), {adam->exp_avg(), adam->exp_avg_sq()}};
          },
          [](Fp32StateForm::Moments m) -> std::unique_ptr<torch::optim::OptimizerParamState> {
            auto s = std::make_unique<State>();
            s->step(m.step);
            s->exp_avg(m.values.at(0));
            s->exp_avg_sq(m.values.at(1));
            return s;
          }};
}

}  // namespace frugal::detail
