#include "frugal/precision/grad_scaler.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <map>

#include "frugal/errors.hpp"

namespace frugal {

void GradScalerOptions::validate() const {
  if (!(init_scale() > 0)) throw OptionError("init_scale", c10::str("init_scale must be > 0, got ", init_scale()));
  if (!(growth_factor() > 1)) {
    throw OptionError("growth_factor", c10::str("growth_factor must be > 1, got ", growth_factor()));
  }
  if (!(backoff_factor() > 0 && backoff_factor() < 1)) {
    throw OptionError("backoff_factor", c10::str("backoff_factor must be in (0, 1), got ", backoff_factor()));
  }
  if (growth_interval() < 1) {
    throw OptionError("growth_interval", c10::str("growth_interval must be >= 1, got ", growth_interval()));
  }
}

GradScaler::GradScaler(GradScalerOptions options) : options_(std::move(options)) { options_.validate(); }

torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  if (!scale_.defined()) {
    scale_ = torch::full({}, options_.init_scale(), torch::TensorOptions().dtype(torch::kFloat).device(loss.device()));
    growth_tracker_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt).device(loss.device()));
  } else if (scale_.device() != loss.device()) {  // state loaded on the CPU: move it once
    scale_ = scale_.to(loss.device());
    growth_tracker_ = growth_tracker_.to(loss.device());
  }
  return loss * scale_;
}

torch::Tensor GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  if (!scale_.defined()) throw TrainingError("GradScaler::unscale before any loss was scaled");
  // As GradScaler._unscale_grads_: the reciprocal in double, then float.
  const torch::Tensor inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  std::map<std::pair<std::string, c10::ScalarType>, std::vector<torch::Tensor>> groups;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (g.scalar_type() == torch::kHalf) {
      throw TrainingError("fp16 gradients cannot be unscaled safely: keep the parameters (master weights) in fp32 "
                          "and let autocast run the forward pass in fp16");
    }
    if (g.is_sparse()) throw TrainingError("GradScaler: sparse gradients are not supported");
    groups[{g.device().str(), g.scalar_type()}].push_back(g);
  }
  torch::Tensor found_inf = torch::zeros({}, scale_.options());
  std::map<std::string, torch::Tensor> found_inf_per_device;
  for (auto& [key, grads] : groups) {
    const torch::Device device = grads.front().device();
    auto [it, inserted] = found_inf_per_device.try_emplace(key.first);
    if (inserted) it->second = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, it->second, inv_scale.to(device, /*non_blocking=*/true));
  }
  for (auto& [device, f] : found_inf_per_device) found_inf += f.to(scale_.device(), /*non_blocking=*/true);
  return found_inf;
}

void GradScaler::update(const torch::Tensor& found_inf) {
  if (!scale_.defined()) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf.to(scale_.device()), options_.growth_factor(),
                         options_.backoff_factor(), options_.growth_interval());
}

double GradScaler::scale_value() const { return scale_.defined() ? scale_.item<double>() : options_.init_scale(); }

void GradScaler::save_state(StateDict& state, const std::string& prefix) const {
  if (!scale_.defined()) return;
  state[prefix + "scale"] = scale_.detach().cpu().clone();
  state[prefix + "growth_tracker"] = growth_tracker_.detach().cpu().clone();
}

void GradScaler::load_state(const StateDict& state, const std::string& prefix) {
  auto scale = state.find(prefix + "scale");
  auto tracker = state.find(prefix + "growth_tracker");
  if (scale == state.end() || tracker == state.end()) return;  // saved before the first scaled step
  const torch::Device device = scale_.defined() ? scale_.device() : torch::Device(torch::kCPU);
  scale_ = scale->second.to(device, torch::kFloat).clone();
  growth_tracker_ = tracker->second.to(device, torch::kInt).clone();
}

}  // namespace frugal
