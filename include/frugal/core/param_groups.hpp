#pragma once
// Parameter groups for the usual "no weight decay on biases and normalisation parameters" rule
// of ImageNet and BERT recipes: one group with the optimizer options' decay, one without.
//
//   auto groups = frugal::weight_decay_groups(module, torch::optim::AdamWOptions(3e-5).weight_decay(0.01),
//       [](const std::string& name, const torch::Tensor&) { return name.find("bias") != std::string::npos; });
//   return std::make_unique<torch::optim::AdamW>(std::move(groups), options);

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace frugal {

/// Name-and-tensor test: true for parameters that get no weight decay.
using DecayExemption = std::function<bool(const std::string& name, const torch::Tensor& parameter)>;

/// Parameters with at most one dimension: biases and normalisation weights (the ResNet recipes' rule).
inline bool is_bias_or_norm(const std::string&, const torch::Tensor& p) { return p.dim() <= 1; }

/// Names containing "bias" or "LayerNorm" (Hugging Face's and NVIDIA's BERT rule).
inline bool is_bias_or_layer_norm(const std::string& name, const torch::Tensor&) {
  return name.find("bias") != std::string::npos || name.find("LayerNorm") != std::string::npos;
}

/// Two groups over `module`'s parameters: the exempt ones with weight_decay 0 (left out if there
/// are none), the others with `options` as given. Options is SGDOptions, AdamWOptions, ...
template <class Options>
std::vector<torch::optim::OptimizerParamGroup> weight_decay_groups(torch::nn::Module& module, const Options& options,
                                                                   const DecayExemption& exempt) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : module.named_parameters()) (exempt(item.key(), item.value()) ? no_decay : decay).push_back(item.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<Options>(options));
  if (!no_decay.empty()) {
    auto without = std::make_unique<Options>(options);
    without->weight_decay(0.0);
    groups.emplace_back(no_decay, std::move(without));
  }
  return groups;
}

}  // namespace frugal
