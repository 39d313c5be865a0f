#include "optim/state_conversion.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <map>

#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal::detail {
namespace {

// The saved key of each tensor of the optimizer's groups, by position, as Optimizer::load maps them.
std::vector<std::vector<std::string>> saved_keys(torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive groups;
  archive.read("param_groups", groups);
  torch::Tensor size;
  groups.read("param_groups/size", size);
  std::vector<std::vector<std::string>> keys;
  for (int64_t g = 0; g < size.item<int64_t>(); ++g) {
    torch::serialize::InputArchive group;
    groups.read(c10::str("param_groups/", g), group);
    torch::Tensor count;
    group.read("params/size", count);
    auto& out = keys.emplace_back();
    for (int64_t j = 0; j < count.item<int64_t>(); ++j) {
      c10::IValue key;
      group.read(c10::str("params/", j), key);
      out.push_back(key.toStringRef());
    }
  }
  return keys;
}

}  // namespace

void adopt_quantized_states(torch::optim::Optimizer& optimizer, const QuantizedStateOptimizer& quantization,
                            torch::serialize::InputArchive& archive, const std::vector<MomentSpec>& specs, const Fp32StateForm& form) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive states;
  archive.read("state", states);
  const auto keys = saved_keys(archive);
  auto& groups = optimizer.param_groups();
  int64_t to_fp32 = 0, to_8bit = 0;
  for (size_t g = 0; g < groups.size() && g < keys.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t j = 0; j < params.size() && j < keys[g].size(); ++j) {
      const torch::Tensor& p = params[j];
      torch::serialize::InputArchive entry;
      if (states.try_read(keys[g][j], entry)) {
        if (auto q = QuantizedParamState::read(entry, specs)) {
          for (size_t m = 0; m < q->moment_count(); ++m) {
            auto& values = q->moment(m);
            if (values.codes.numel() != p.numel()) {
              throw CheckpointError(c10::str("the 8-bit optimizer state of a parameter of ", p.numel(), " elements has ", values.codes.numel(),
                                             " codes: the model changed"));
            }
            values = {values.codes.to(p.device()), values.absmax.to(p.device())};
          }
          optimizer.state()[p.unsafeGetTensorImpl()] = std::move(q);
        }
      }
      auto found = optimizer.state().find(p.unsafeGetTensorImpl());
      if (found == optimizer.state().end()) continue;
      auto* q = dynamic_cast<QuantizedParamState*>(found->second.get());
      const bool want_8bit = quantization.quantized(p);
      if (q && !want_8bit) {
        Fp32StateForm::Moments moments{q->step(), {}};
        for (size_t m = 0; m < q->moment_count(); ++m) {
          torch::Tensor shaped = torch::empty_like(p, p.options().dtype(torch::kFloat32));
          shaped.copy_(dequantize_blockwise(q->moment(m), specs[m].is_signed).view(p.sizes()));
          moments.values.push_back(shaped.to(p.scalar_type()));
        }
        found->second = form.make(std::move(moments));
        ++to_fp32;
      } else if (!q && want_8bit) {
        auto moments = form.read(*found->second);
        if (!moments) continue;
        std::vector<QuantizedValues> values;
        for (size_t m = 0; m < specs.size(); ++m) values.push_back(quantize_blockwise(moments->values.at(m).to(p.device()), specs[m].is_signed));
        found->second = std::make_unique<QuantizedParamState>(moments->step, std::move(values), specs);
        ++to_8bit;
      }
    }
  }
  if (to_fp32 > 0) log::info(c10::str("optimizer: ", to_fp32, " parameters' 8-bit states loaded as fp32 states (optimizer.state_bits=32)"));
  if (to_8bit > 0) {
    log::info(c10::str("optimizer: ", to_8bit, " parameters' fp32 states quantized to 8 bits (optimizer.state_bits=8)"));
  }
}

}  // namespace frugal::detail
