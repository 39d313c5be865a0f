#pragma once
// The state an optimizer keeps for a parameter with 8-bit states: its step count and, per
// moment (Adam: exp_avg, exp_avg_sq; SGD: momentum_buffer), the codes and block maxima. In an
// archive each moment is two entries, "<name>_codes" (uint8, one a parameter element, sliced
// like any per-element state when a checkpoint is resharded) and "<name>_absmax" (fp32, one a
// block of kQuantizationBlock elements of the parameter, sliced by block).
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim/detail/quantized_steps.hpp"

namespace frugal {

/// One moment of an optimizer: its name in the state and whether its values have a sign.
struct MomentSpec {
  std::string name;
  bool is_signed = true;
};

class QuantizedParamState : public torch::optim::OptimizerParamState {
 public:
  QuantizedParamState(int64_t step, std::vector<detail::QuantizedValues> moments, std::vector<MomentSpec> specs);
  /// Zero moments for `param` (codes 0, maxima 0: every value 0), step 0.
  static std::unique_ptr<QuantizedParamState> zeros(const torch::Tensor& param, const std::vector<MomentSpec>& specs);
  /// Read from an archive entry; null when the entry holds no 8-bit moments (an fp32 state).
  static std::unique_ptr<QuantizedParamState> read(torch::serialize::InputArchive& entry, const std::vector<MomentSpec>& specs);

  int64_t step() const { return step_; }
  void step(int64_t s) { step_ = s; }
  detail::QuantizedValues& moment(size_t i) { return moments_.at(i); }
  const detail::QuantizedValues& moment(size_t i) const { return moments_.at(i); }
  size_t moment_count() const { return moments_.size(); }
  const MomentSpec& spec(size_t i) const { return specs_.at(i); }
  /// Every tensor it holds, for memory reports.
  std::vector<torch::Tensor> tensors() const;

  std::unique_ptr<torch::optim::OptimizerParamState> clone() const override;
  void serialize(torch::serialize::OutputArchive& archive) const override;

 private:
  int64_t step_ = 0;
  std::vector<detail::QuantizedValues> moments_;
  std::vector<MomentSpec> specs_;
};

/// Whether an archive key names the block maxima of an 8-bit moment.
bool is_block_maxima_key(const std::string& key);

/// A state's archive entries with every 8-bit moment ("<name>_codes" and "<name>_absmax")
/// replaced by its fp32 values under "<name>", flat; other entries as they are. Adam's exp_avg_sq
/// is the unsigned moment, every other one signed.
std::map<std::string, c10::IValue> with_fp32_moments(const std::map<std::string, c10::IValue>& entries);

}  // namespace frugal
