#include "optim/quantized_param_state.hpp"

#include <c10/util/StringUtil.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/torch.h>

#include "frugal/errors.hpp"
#include "frugal/optim/state_quantization.hpp"

namespace frugal {
namespace {
constexpr const char* kCodes = "_codes";
constexpr const char* kAbsmax = "_absmax";

// One moment's two archive entries, checked: uint8 codes, and one fp32 maximum per block of them.
detail::QuantizedValues checked_moment(const std::string& name, const c10::IValue& codes, const c10::IValue& absmax) {
  if (!codes.isTensor() || !absmax.isTensor()) throw CheckpointError(c10::str("the 8-bit optimizer state '", name, "' is not two tensors"));
  detail::QuantizedValues m{codes.toTensor().reshape({-1}).contiguous(), absmax.toTensor().reshape({-1}).contiguous()};
  const int64_t blocks = detail::blocks_of(m.codes.numel());
  if (m.codes.scalar_type() != torch::kUInt8 || m.absmax.scalar_type() != torch::kFloat32 || m.absmax.numel() != blocks) {
    throw CheckpointError(c10::str("the 8-bit optimizer state '", name, "' has ", m.codes.numel(), " codes (", m.codes.scalar_type(), ") and ",
                                   m.absmax.numel(), " block maxima (", m.absmax.scalar_type(), "); expected uint8 codes and ", blocks,
                                   " fp32 maxima"));
  }
  return m;
}
}  // namespace

QuantizedParamState::QuantizedParamState(int64_t step, std::vector<detail::QuantizedValues> moments, std::vector<MomentSpec> specs)
    : step_(step), moments_(std::move(moments)), specs_(std::move(specs)) {
  TORCH_INTERNAL_ASSERT(moments_.size() == specs_.size(), "one spec a moment");
}

std::unique_ptr<QuantizedParamState> QuantizedParamState::zeros(const torch::Tensor& param, const std::vector<MomentSpec>& specs) {
  const int64_t n = param.numel(), blocks = detail::blocks_of(n);
  std::vector<detail::QuantizedValues> moments;
  for (size_t i = 0; i < specs.size(); ++i) {
    moments.push_back({torch::zeros({n}, param.options().dtype(torch::kUInt8)), torch::zeros({blocks}, param.options().dtype(torch::kFloat32))});
  }
  return std::make_unique<QuantizedParamState>(0, std::move(moments), specs);
}

std::unique_ptr<QuantizedParamState> QuantizedParamState::read(torch::serialize::InputArchive& entry, const std::vector<MomentSpec>& specs) {
  std::vector<detail::QuantizedValues> moments;
  for (const auto& spec : specs) {
    c10::IValue codes, absmax;
    const bool has_codes = entry.try_read(spec.name + kCodes, codes), has_absmax = entry.try_read(spec.name + kAbsmax, absmax);
    if (!has_codes && !has_absmax) {
      if (moments.empty()) continue;  // an fp32 state has none
    }
    if (!has_codes || !has_absmax) {
      throw CheckpointError(c10::str("an 8-bit optimizer state lacks '", spec.name, has_codes ? kAbsmax : kCodes, "'"));
    }
    moments.push_back(checked_moment(spec.name, codes, absmax));
  }
  if (moments.empty()) return nullptr;
  if (moments.size() != specs.size()) throw CheckpointError(c10::str("an 8-bit optimizer state lacks '", specs.front().name, kCodes, "'"));
  c10::IValue step;
  int64_t steps = 0;
  if (entry.try_read("step", step)) steps = step.isTensor() ? step.toTensor().item<int64_t>() : step.toInt();
  return std::make_unique<QuantizedParamState>(steps, std::move(moments), specs);
}

std::vector<torch::Tensor> QuantizedParamState::tensors() const {
  std::vector<torch::Tensor> out;
  for (const auto& m : moments_) out.insert(out.end(), {m.codes, m.absmax});
  return out;
}

std::unique_ptr<torch::optim::OptimizerParamState> QuantizedParamState::clone() const {
  std::vector<detail::QuantizedValues> copies;
  for (const auto& m : moments_) copies.push_back({m.codes.clone(), m.absmax.clone()});
  return std::make_unique<QuantizedParamState>(step_, std::move(copies), specs_);
}

void QuantizedParamState::serialize(torch::serialize::OutputArchive& archive) const {
  archive.write("step", c10::IValue(step_));
  for (size_t i = 0; i < moments_.size(); ++i) {
    archive.write(specs_[i].name + kCodes, c10::IValue(moments_[i].codes));
    archive.write(specs_[i].name + kAbsmax, c10::IValue(moments_[i].absmax));
  }
}

std::map<std::string, c10::IValue> with_fp32_moments(const std::map<std::string, c10::IValue>& entries) {
  std::map<std::string, c10::IValue> out;
  const std::string codes_suffix = kCodes;
  for (const auto& [key, value] : entries) {
    if (is_block_maxima_key(key)) continue;  // taken with its codes
    if (key.size() <= codes_suffix.size() || key.compare(key.size() - codes_suffix.size(), codes_suffix.size(), codes_suffix) != 0) {
      out.emplace(key, value);
      continue;
    }
    const std::string name = key.substr(0, key.size() - codes_suffix.size());
    const auto absmax = entries.find(name + kAbsmax);
    if (absmax == entries.end()) throw CheckpointError(c10::str("an 8-bit optimizer state lacks '", name, kAbsmax, "'"));
    out.emplace(name, detail::dequantize_blockwise(checked_moment(name, value, absmax->second), name != "exp_avg_sq"));
  }
  return out;
}

bool is_block_maxima_key(const std::string& key) {
  const std::string suffix = kAbsmax;
  return key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace frugal
