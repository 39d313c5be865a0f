#pragma once
// Dynamic loss scaling for fp16 training, with the arithmetic of torch.amp.GradScaler: the
// same ATen kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_), the same
// defaults and the same state, so a scale sequence matches PyTorch's step for step. The scale
// lives on the device; nothing here syncs with the host except scale_value().
//
//   frugal::GradScaler scaler;
//   scaler.scale(loss).backward();
//   torch::Tensor found_inf = scaler.unscale(params);   // grads now true gradients
//   if (found_inf.item<float>() == 0) optimizer.step();  // the one host sync per step
//   scaler.update(found_inf);

#include <torch/arg.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "frugal/base/state_dict.hpp"

namespace frugal {

struct GradScalerOptions {
  TORCH_ARG(double, init_scale) = 65536.0;  // 2^16
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale; creates the scale on the loss's device the first time.
  torch::Tensor scale(const torch::Tensor& loss);
  /// Divides the gradients of `params` by the scale in place, grouped by device and dtype,
  /// and returns a float tensor on the scale's device that is > 0 if any was inf or nan.
  torch::Tensor unscale(const std::vector<torch::Tensor>& params);
  /// Backs off after an overflow, grows after growth_interval clean steps.
  void update(const torch::Tensor& found_inf);

  bool started() const { return scale_.defined(); }
  /// The current scale (syncs with the device).
  double scale_value() const;
  const GradScalerOptions& options() const { return options_; }

  void save_state(StateDict& state, const std::string& prefix) const;
  void load_state(const StateDict& state, const std::string& prefix);

 private:
  GradScalerOptions options_;
  torch::Tensor scale_;           // float32 scalar
  torch::Tensor growth_tracker_;  // int32 scalar: clean steps since the last change
};

}  // namespace frugal
