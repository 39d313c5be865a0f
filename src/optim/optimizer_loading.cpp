#include "optim/optimizer_loading.hpp"

#include <c10/util/StringUtil.h>
#include <c10/util/TypeIndex.h>
#include <torch/optim.h>
#include <torch/serialize/input-archive.h>

#include <sstream>

#include "frugal/errors.hpp"
#include "frugal/optim/state_quantization.hpp"
#include "optim/optimizer_archive.hpp"
#include "optim/portable_state.hpp"
#include "optim/quantized_param_state.hpp"

namespace frugal::detail {
namespace {

// Whether any parameter's state in the archive holds 8-bit moments.
bool holds_8bit_states(torch::serialize::InputArchive& root) {
  torch::serialize::InputArchive states;
  if (!root.try_read("state", states)) return false;
  for (const auto& key : states.keys()) {
    torch::serialize::InputArchive entry;
    if (!states.try_read(key, entry)) continue;
    for (const auto& name : entry.keys()) {
      if (is_block_maxima_key(name)) return true;
    }
  }
  return false;
}

std::string type_name(const torch::optim::Optimizer& optimizer) {
  if (const auto* q = quantized_states_of(optimizer)) return q->optimizer_name();
  return c10::demangle(typeid(optimizer).name());
}

// A state LibTorch's optimizers would step with a missing tensor (the crash "Expected a proper
// Tensor but got None" at the next step): named now instead.
void check_states_defined(const torch::optim::Optimizer& optimizer) {
  for (const auto& [key, state] : optimizer.state()) {
    (void)key;
    bool missing = false;
    if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      missing = !adamw->exp_avg().defined() || !adamw->exp_avg_sq().defined();
    } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      missing = !adam->exp_avg().defined() || !adam->exp_avg_sq().defined();
    }
    if (missing) {
      throw CheckpointError(c10::str("the checkpoint's optimizer state has no moments for ", type_name(optimizer),
                                     " (written by another optimizer?); resume with the optimizer that wrote it"));
    }
  }
}

}  // namespace

void load_optimizer_state(torch::optim::Optimizer& optimizer, const torch::nn::Module& module, const std::string& bytes,
                          const c10::Device& device) {
  std::istringstream stream(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(stream, device);
  const bool converts_itself = quantized_states_of(optimizer) != nullptr;
  if (converts_itself || !holds_8bit_states(archive)) {
    optimizer.load(archive);
    check_states_defined(optimizer);
    return;
  }
  if (!saves_like_libtorch(optimizer)) {
    throw CheckpointError(c10::str("the checkpoint holds 8-bit optimizer states (optimizer.state_bits=8), which ", type_name(optimizer),
                                   " cannot load: resume with Frugal's optimizer (FusedAdamW, FusedAdam, QuantizedSGD; ",
                                   "optimizer.fused=true in the examples) or a LibTorch optimizer"));
  }
  // LibTorch's optimizers: the 8-bit moments become their fp32 values, keyed as the optimizer keys them.
  const GroupSlots slots = whole_parameter_slots(optimizer, module);
  PortableOptimizerState state;
  state.add_serialized(bytes, slots, "the checkpoint's optimizer state");
  state.load_into(optimizer, slots, device, "the checkpoint's optimizer state");
  check_states_defined(optimizer);
}

}  // namespace frugal::detail
