#include "frugal/optim/quantized_sgd.hpp"

#include <torch/torch.h>

#include "optim/quantized_param_state.hpp"
#include "optim/state_conversion.hpp"

namespace frugal {
namespace {

const std::vector<MomentSpec>& momentum_moments() {
  static const std::vector<MomentSpec> specs{{"momentum_buffer", true}};
  return specs;
}

detail::Fp32StateForm sgd_fp32_form() {
  return {[](const torch::optim::OptimizerParamState& s) -> std::optional<detail::Fp32StateForm::Moments> {
            const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&s);
            if (!sgd || !sgd->momentum_buffer().defined()) return std::nullopt;
            return detail::Fp32StateForm::Moments{1, {sgd->momentum_buffer()}};  // a buffer exists: past the first step
          },
          [](detail::Fp32StateForm::Moments m) -> std::unique_ptr<torch::optim::OptimizerParamState> {
            auto s = std::make_unique<torch::optim::SGDParamState>();
            s->momentum_buffer(m.values.at(0));
            return s;
          }};
}

}  // namespace

QuantizedSGD::QuantizedSGD(std::vector<torch::optim::OptimizerParamGroup> param_groups, torch::optim::SGDOptions defaults,
                           StateQuantization quantization)
    : torch::optim::SGD(std::move(param_groups), defaults), QuantizedStateOptimizer(quantization) {}

QuantizedSGD::QuantizedSGD(std::vector<torch::Tensor> params, torch::optim::SGDOptions defaults, StateQuantization quantization)
    : QuantizedSGD({torch::optim::OptimizerParamGroup(std::move(params))}, defaults, quantization) {}

torch::Tensor QuantizedSGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (o.momentum() != 0 && quantized(p)) {
        auto& slot = state()[p.unsafeGetTensorImpl()];
        if (!slot) slot = QuantizedParamState::zeros(p, momentum_moments());
        auto* s = dynamic_cast<QuantizedParamState*>(slot.get());
        TORCH_CHECK(s, "an 8-bit parameter holds an fp32 optimizer state (changed state_bits without loading a checkpoint?)");
        const detail::MomentumConstants c{static_cast<float>(o.lr()), static_cast<float>(o.momentum()),
                                          static_cast<float>(1.0 - o.dampening()), static_cast<float>(o.weight_decay()), o.nesterov(),
                                          s->step() == 0};
        detail::momentum_step_8bit(p, p.grad(), s->moment(0), c);
        s->step(s->step() + 1);
        continue;
      }
      // torch::optim::SGD::step, for one parameter.
      torch::Tensor d_p = p.grad();
      if (o.weight_decay() != 0) d_p = d_p.add(p, o.weight_decay());
      if (o.momentum() != 0) {
        auto& slot = state()[p.unsafeGetTensorImpl()];
        torch::Tensor buffer;
        if (!slot) {
          buffer = torch::clone(d_p).detach();
          auto fresh = std::make_unique<torch::optim::SGDParamState>();
          fresh->momentum_buffer(buffer);
          slot = std::move(fresh);
        } else {
          auto* s = dynamic_cast<torch::optim::SGDParamState*>(slot.get());
          TORCH_CHECK(s, "an fp32 parameter holds an 8-bit optimizer state (changed state_bits without loading a checkpoint?)");
          buffer = s->momentum_buffer();
          buffer.mul_(o.momentum()).add_(d_p, 1 - o.dampening());
        }
        d_p = o.nesterov() ? d_p.add(buffer, o.momentum()) : buffer;
      }
      p.add_(d_p, -1 * o.lr());
    }
  }
  return loss;
}

void QuantizedSGD::load(torch::serialize::InputArchive& archive) {
  torch::optim::SGD::load(archive);
  detail::adopt_quantized_states(*this, *this, archive, momentum_moments(), sgd_fp32_form());
}

}  // namespace frugal
