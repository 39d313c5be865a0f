#include "frugal/optim/fused_adam_family.hpp"

#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>

#include "optim/detail/adam_family.hpp"

namespace frugal {
namespace {

// What sets the two apart: the state type, how weight decay applies, and ATen's kernel.
template <class Options>
struct Variant;
template <>
struct Variant<torch::optim::AdamOptions> {
  using State = torch::optim::AdamParamState;
  static constexpr bool decoupled = false;
  static constexpr const char* name = "frugal::FusedAdam";
  static void fused(auto&&... args) { at::_fused_adam_(args...); }
};
template <>
struct Variant<torch::optim::AdamWOptions> {
  using State = torch::optim::AdamWParamState;
  static constexpr bool decoupled = true;
  static constexpr const char* name = "frugal::FusedAdamW";
  static void fused(auto&&... args) { at::_fused_adamw_(args...); }
};

}  // namespace

template <class Base, class Options>
FusedAdamFamily<Base, Options>::FusedAdamFamily(std::vector<torch::optim::OptimizerParamGroup> param_groups, Options defaults,
                                                StateQuantization quantization)
    : Base(std::move(param_groups), defaults), QuantizedStateOptimizer(quantization) {
  detail::refuse_amsgrad_in_8bit<Options>(*this, *this);
}

template <class Base, class Options>
FusedAdamFamily<Base, Options>::FusedAdamFamily(std::vector<torch::Tensor> params, Options defaults, StateQuantization quantization)
    : FusedAdamFamily(std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(std::move(params))}, defaults,
                      quantization) {}

template <class Base, class Options>
torch::Tensor FusedAdamFamily<Base, Options>::step(torch::optim::Optimizer::LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  using V = Variant<Options>;
  detail::adam_family_step<Options, typename V::State>(*this, *this, V::decoupled, [](auto&&... args) { V::fused(args...); });
  return loss;
}

template <class Base, class Options>
void FusedAdamFamily<Base, Options>::add_param_group(const torch::optim::OptimizerParamGroup& param_group) {
  detail::add_checked_param_group<Options>(*this, *this, param_group);
}

template <class Base, class Options>
void FusedAdamFamily<Base, Options>::load(torch::serialize::InputArchive& archive) {
  Base::load(archive);
  detail::refuse_amsgrad_in_8bit<Options>(*this, *this, " of the loaded optimizer state");
  detail::adopt_quantized_states(*this, *this, archive, detail::adam_moments(), detail::adam_fp32_form<typename Variant<Options>::State>());
}

template <class Base, class Options>
const char* FusedAdamFamily<Base, Options>::optimizer_name() const {
  return Variant<Options>::name;
}

template class FusedAdamFamily<torch::optim::Adam, torch::optim::AdamOptions>;
template class FusedAdamFamily<torch::optim::AdamW, torch::optim::AdamWOptions>;

}  // namespace frugal
