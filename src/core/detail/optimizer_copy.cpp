#include "optimizer_copy.hpp"

#include <map>

#include "frugal/optim/state_quantization.hpp"

namespace frugal::detail {
namespace {

// The copy's parameters are placeholders: serialization records only their identity and order.
template <class Opt, class Options>
std::unique_ptr<Opt> same_groups(torch::optim::Optimizer& source, std::map<void*, void*>& placeholder_of) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto& g : source.param_groups()) {
    std::vector<torch::Tensor> params;
    for (auto& p : g.params()) {
      params.push_back(torch::empty({0}));
      placeholder_of[p.unsafeGetTensorImpl()] = params.back().unsafeGetTensorImpl();
    }
    groups.emplace_back(params, g.options().clone());
  }
  return std::make_unique<Opt>(groups, static_cast<const Options&>(source.defaults()));
}

template <class Opt, class Options, class State, class CopyState>
std::unique_ptr<torch::optim::Optimizer> copy_as(torch::optim::Optimizer& source, CopyState copy_state) {
  std::map<void*, void*> placeholder_of;
  auto copy = same_groups<Opt, Options>(source, placeholder_of);
  for (auto& [key, state] : source.state()) {
    auto fresh = std::make_unique<State>();
    copy_state(static_cast<const State&>(*state), *fresh);
    copy->state()[placeholder_of.at(key)] = std::move(fresh);
  }
  return copy;
}

// An alias of `from` in `to`, whose place is listed in `deferred` for the staged copy.
void alias_tensor(const torch::Tensor& from, torch::Tensor& to, std::vector<torch::Tensor*>& deferred) {
  if (!from.defined()) return;
  to = from.detach();
  deferred.push_back(&to);
}

template <class State>
void copy_adam_state(const State& from, State& to, std::vector<torch::Tensor*>& deferred) {
  to.step(from.step());
  alias_tensor(from.exp_avg(), to.exp_avg(), deferred);
  alias_tensor(from.exp_avg_sq(), to.exp_avg_sq(), deferred);
  alias_tensor(from.max_exp_avg_sq(), to.max_exp_avg_sq(), deferred);
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> staged_copy_of_optimizer(torch::optim::Optimizer& optimizer, std::vector<torch::Tensor*>& deferred) {
  using namespace torch::optim;
  // 8-bit states are not the base class's: such an optimizer is serialized instead.
  if (has_8bit_states(optimizer)) return nullptr;
  if (dynamic_cast<SGD*>(&optimizer)) {
    return copy_as<SGD, SGDOptions, SGDParamState>(optimizer, [&deferred](const SGDParamState& from, SGDParamState& to) {
      alias_tensor(from.momentum_buffer(), to.momentum_buffer(), deferred);
    });
  }
  if (dynamic_cast<AdamW*>(&optimizer)) {
    return copy_as<AdamW, AdamWOptions, AdamWParamState>(
        optimizer, [&deferred](const AdamWParamState& from, AdamWParamState& to) { copy_adam_state(from, to, deferred); });
  }
  if (dynamic_cast<Adam*>(&optimizer)) {
    return copy_as<Adam, AdamOptions, AdamParamState>(
        optimizer, [&deferred](const AdamParamState& from, AdamParamState& to) { copy_adam_state(from, to, deferred); });
  }
  return nullptr;
}

}  // namespace frugal::detail
