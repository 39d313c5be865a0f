#pragma once
// A LibTorch module together with the user code that turns a batch into a loss (training) and
// into metrics (validation). The Trainer only sees this type-erased handle, so any module works.
// Policies that need a private copy of the model (the CPU smoke test, later the batch-size
// finder) get one through copy_to(): for modules derived from torch::nn::Cloneable this is
// clone(); otherwise pass a factory that builds the same architecture.
//
//   auto net = std::make_shared<Net>();            // Net : torch::nn::Cloneable<Net>
//   frugal::Model model(net,
//       [](Net& n, const frugal::Batch& b) { return torch::cross_entropy_loss(n.forward(b.input), b.target); },
//       [](Net& n, const frugal::Batch& b) { return frugal::BatchMetrics{{"accuracy", accuracy(n, b)}}; });

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "frugal/base/metrics.hpp"
#include "frugal/data/batch.hpp"
#include "frugal/errors.hpp"

namespace frugal {

template <class Net>
using LossFn = std::function<torch::Tensor(Net&, const Batch&)>;
template <class Net>
using MetricsFn = std::function<BatchMetrics(Net&, const Batch&)>;

class Model {
 public:
  /// Wraps `net`; `metrics` may be empty when there is no validation.
  template <class Net>
  Model(std::shared_ptr<Net> net, LossFn<Net> loss, MetricsFn<Net> metrics = {})
      : Model(std::move(net), std::move(loss), std::move(metrics), std::function<std::shared_ptr<Net>()>{}) {}

  /// As above, with a factory that builds a fresh module of the same architecture; used for
  /// copies when Net is not Cloneable.
  template <class Net>
  Model(std::shared_ptr<Net> net, LossFn<Net> loss, MetricsFn<Net> metrics,
        std::function<std::shared_ptr<Net>()> factory);

  torch::nn::Module& module() const { return *module_; }
  std::shared_ptr<torch::nn::Module> module_ptr() const { return module_; }
  bool has_metrics() const { return static_cast<bool>(metrics_); }

  /// The training loss; throws TrainingError unless it is a scalar that requires grad.
  torch::Tensor loss(const Batch& batch) const;
  BatchMetrics metrics(const Batch& batch) const;

  /// A deep copy (parameters and buffers) on `device`, with the same loss and metrics code.
  Model copy_to(const torch::Device& device) const;

 private:
  using ErasedLoss = std::function<torch::Tensor(torch::nn::Module&, const Batch&)>;
  using ErasedMetrics = std::function<BatchMetrics(torch::nn::Module&, const Batch&)>;
  using ErasedCopy = std::function<std::shared_ptr<torch::nn::Module>(const torch::nn::Module&,
                                                                      const torch::Device&)>;
  Model(std::shared_ptr<torch::nn::Module> module, ErasedLoss loss, ErasedMetrics metrics, ErasedCopy copy)
      : module_(std::move(module)), loss_(std::move(loss)), metrics_(std::move(metrics)), copy_(std::move(copy)) {}

  std::shared_ptr<torch::nn::Module> module_;
  ErasedLoss loss_;
  ErasedMetrics metrics_;
  ErasedCopy copy_;  // empty when neither clone() nor a factory is available
};

namespace detail {
/// Copies every parameter and buffer of `from` into `to` (same architecture), then moves `to`.
void copy_state(const torch::nn::Module& from, torch::nn::Module& to, const torch::Device& device);
}  // namespace detail

template <class Net>
Model::Model(std::shared_ptr<Net> net, LossFn<Net> loss, MetricsFn<Net> metrics,
             std::function<std::shared_ptr<Net>()> factory)
    : module_(net) {
  static_assert(std::is_base_of_v<torch::nn::Module, Net>, "Net must derive from torch::nn::Module");
  if (!net) throw OptionError("module", "frugal::Model: module is null");
  if (!loss) throw OptionError("loss", "frugal::Model: a loss function is required");
  loss_ = [loss = std::move(loss)](torch::nn::Module& m, const Batch& b) {
    return loss(static_cast<Net&>(m), b);
  };
  if (metrics) {
    metrics_ = [metrics = std::move(metrics)](torch::nn::Module& m, const Batch& b) {
      return metrics(static_cast<Net&>(m), b);
    };
  }
  if (factory) {
    copy_ = [factory = std::move(factory)](const torch::nn::Module& from, const torch::Device& device) {
      std::shared_ptr<Net> fresh = factory();
      detail::copy_state(from, *fresh, device);
      return std::static_pointer_cast<torch::nn::Module>(fresh);
    };
  } else if constexpr (std::is_base_of_v<torch::nn::Cloneable<Net>, Net>) {
    copy_ = [](const torch::nn::Module& from, const torch::Device& device) {
      return static_cast<const Net&>(from).clone(device);
    };
  }
}

}  // namespace frugal
