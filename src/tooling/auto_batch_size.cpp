#include "frugal/tooling/auto_batch_size.hpp"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>
#include <c10/util/Type.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <optional>

#include "frugal/core/probe_step.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"
#include "frugal/optim/state_quantization.hpp"
#include "frugal/precision/autocast_guard.hpp"

namespace frugal {

std::pair<int64_t, int64_t> keep_effective_batch(int64_t effective_per_rank, int64_t batch_size) {
  if (effective_per_rank <= batch_size) return {effective_per_rank, 1};
  for (int64_t b = batch_size; b > 1; --b) {
    if (effective_per_rank % b == 0) return {b, effective_per_rank / b};
  }
  return {1, effective_per_rank};
}

ProbeBatch repeat_example(std::shared_ptr<const Dataset> data, int64_t index, std::string shape) {
  if (!data || index < 0 || index >= data->size()) throw OptionError("auto_batch", c10::str("probe example ", index, " is not in the data"));
  return {[data = std::move(data), index](int64_t n) { return data->get_batch(std::vector<int64_t>(static_cast<size_t>(n), index)); },
          std::move(shape)};
}

BatchSizeSearch choose_batch_size(Trainer& trainer, const ProbeBatch& probe, const MixedPrecisionOptions& precision,
                                  const BatchSizeFinderOptions& options) {
  if (!probe.make) throw OptionError("auto_batch.enabled", "automatic batch size: this program gives no probe batch");
  if (trainer.state().micro_step > 0) throw TrainingError("automatic batch size: training has already started");
  torch::nn::Module& module = trainer.model().module();
  const torch::Device device = trainer.device();

  // What the trials change, kept on the host and put back afterwards.
  std::vector<torch::Tensor> state;
  for (const auto& t : module.parameters()) state.push_back(t.detach().cpu().clone());
  for (const auto& t : module.buffers()) state.push_back(t.detach().cpu().clone());
  const torch::Tensor cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
  std::optional<torch::Tensor> cuda_rng;
  if (device.is_cuda()) cuda_rng = at::cuda::detail::getDefaultCUDAGenerator(device.index()).get_state();
  const bool was_training = module.is_training();

  // The step the fit will make, in its precision (the probe's memory is the fit's).
  ProbeStepOptions step;
  step.forward_scope = [&] { return autocast_scope(precision.mode(), precision.autocast(), device.type()); };
  auto trial = [&](int64_t n) {
    module.train();
    const Batch batch = probe.make(n).to(device, /*non_blocking=*/false);
    std::unique_ptr<torch::optim::Optimizer> optimizer = trainer.optimizer_factory()(module);
    probe_step(trainer.model(), *optimizer, batch, step);
  };
  const std::string precision_name = to_string(precision.mode());
  // The optimizer's kind and its state bits change what a step needs: part of the cached answer's key.
  std::string optimizer_kind;
  {
    const std::unique_ptr<torch::optim::Optimizer> sample = trainer.optimizer_factory()(module);
    const torch::optim::Optimizer& o = *sample;
    optimizer_kind = c10::demangle(typeid(o).name());
    if (const auto* q = quantized_states_of(o)) {
      optimizer_kind = c10::str(q->optimizer_name(), " state_bits ", q->state_quantization().bits());
    }
  }
  const std::string key =
      batch_size_cache_key(module, device, precision_name, trainer.world_size(), probe.shape + "|optimizer " + optimizer_kind);
  BatchSizeSearch search;
  try {
    search = find_batch_size(trial, device, options, key, trainer.world_size() > 1 ? &trainer.communicator() : nullptr);
  } catch (...) {
    module.zero_grad(/*set_to_none=*/true);
    throw;
  }
  {
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& t : module.parameters()) t.copy_(state[i++]);
    for (auto& t : module.buffers()) t.copy_(state[i++]);
  }
  module.zero_grad(/*set_to_none=*/true);
  module.train(was_training);
  at::Generator cpu_generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  cpu_generator.set_state(cpu_rng);
  if (cuda_rng) {
    at::Generator cuda_generator = at::cuda::detail::getDefaultCUDAGenerator(device.index());
    cuda_generator.set_state(*cuda_rng);
  }
  trainer.set_batch_size(search.batch_size);
  return search;
}

}  // namespace frugal
