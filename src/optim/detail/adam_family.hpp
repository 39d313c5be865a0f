#pragma once
// The step and the load of FusedAdamW and FusedAdam, which differ only in their options, their
// fp32 state class, their fp32 fused kernel and where the weight decay goes.
#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <map>
#include <tuple>
#include <utility>

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

/// Refuses what 8-bit states cannot honour (amsgrad's third state) in any group: called at
/// construction, by add_param_group, at each step and after a load, wherever options can enter.
template <class Options>
void refuse_amsgrad_in_8bit(const torch::optim::Optimizer& optimizer, const QuantizedStateOptimizer& q, const char* how = "") {
  if (q.state_quantization().bits() != 8) return;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    if (static_cast<const Options&>(groups[g].options()).amsgrad()) {
      throw OptionError("state_bits", c10::str("state_bits=8 keeps Adam's two moments in 8 bits; amsgrad's third state is not supported with it",
                                               " (parameter group ", g, how, ")"));
    }
  }
}

/// Adds a group as torch::optim::Optimizer::add_param_group does, unless it asks for what the
/// optimizer's states cannot honour: then the optimizer is left as it was.
template <class Options>
void add_checked_param_group(torch::optim::Optimizer& optimizer, const QuantizedStateOptimizer& q,
                             const torch::optim::OptimizerParamGroup& group) {
  optimizer.add_param_group(group);  // torch::optim::Optimizer's (not virtual)
  try {
    refuse_amsgrad_in_8bit<Options>(optimizer, q, ", added with add_param_group");
  } catch (...) {
    optimizer.param_groups().pop_back();
    throw;
  }
}

/// Whether two tensors of one shape lay their elements out alike (strides of size-1 dimensions
/// do not matter).
inline bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

/// `t` in the layout of `like` (itself when it already is).
inline torch::Tensor in_layout_of(const torch::Tensor& t, const torch::Tensor& like) {
  if (same_layout(t, like)) return t;
  return torch::empty_strided(like.sizes(), like.strides(), t.options()).copy_(t);
}

/// One step. `fused_fp32` is ATen's _fused_adamw_ or _fused_adam_.
///
/// ATen's fused kernels walk a parameter, its gradient and its moments as one flat array each, so
/// they must share a layout: on the CPU a transposed parameter with a contiguous gradient is
/// silently updated with the wrong elements' gradients (pytorch/pytorch#106951), on CUDA it is
/// refused (#110758). Each tensor is therefore handed over in one layout: the parameter's when it
/// is dense, else a contiguous copy that is copied back (the moments are kept in that layout).
template <class Options, class State, class FusedKernel>
void adam_family_step(torch::optim::Optimizer& optimizer, const QuantizedStateOptimizer& q, bool decoupled, FusedKernel fused_fp32) {
  refuse_amsgrad_in_8bit<Options>(optimizer, q);
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    // One fp32 kernel call per (device, dtype, step count): the fused kernel wants them uniform.
    struct Batch {
      std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
      std::vector<std::pair<torch::Tensor, torch::Tensor>> copy_back;  // (parameter, its dense stand-in)
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
      const torch::Tensor dense = p.is_non_overlapping_and_dense() ? p : p.contiguous();
      if (!slot) {  // as torch::optim::Adam(W) initialises it
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(dense, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(dense, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(dense, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto* s = dynamic_cast<State*>(slot.get());
      TORCH_CHECK(s, "an fp32 parameter holds an 8-bit optimizer state (changed state_bits without loading a checkpoint?)");
      // Moments loaded or made in another layout are kept in the parameter's from now on.
      s->exp_avg(in_layout_of(s->exp_avg(), dense));
      s->exp_avg_sq(in_layout_of(s->exp_avg_sq(), dense));
      if (options.amsgrad() && s->max_exp_avg_sq().defined()) s->max_exp_avg_sq(in_layout_of(s->max_exp_avg_sq(), dense));
      s->step(s->step() + 1);
      Batch& b = batches[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type()), s->step()}];
      b.params.push_back(dense);
      b.grads.push_back(in_layout_of(p.grad(), dense));
      b.exp_avgs.push_back(s->exp_avg());
      b.exp_avg_sqs.push_back(s->exp_avg_sq());
      if (options.amsgrad()) b.max_exp_avg_sqs.push_back(s->max_exp_avg_sq());
      if (!dense.is_same(p)) b.copy_back.emplace_back(p, dense);
    }
    for (auto& [key, b] : batches) {
      // The kernel reads each parameter's step count from a float tensor; all share this one.
      const torch::Tensor step_count = torch::full({}, static_cast<double>(std::get<3>(key)),
                                                   b.params.front().options().dtype(torch::kFloat32));
      const std::vector<torch::Tensor> steps(b.params.size(), step_count);
      fused_fp32(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, steps, options.lr(), std::get<0>(options.betas()),
                 std::get<1>(options.betas()), options.weight_decay(), options.eps(), options.amsgrad(), /*maximize=*/false);
      for (auto& [param, dense] : b.copy_back) param.copy_(dense);
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
