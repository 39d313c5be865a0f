#pragma once
// Utilisation figures added to every training log line (metrics.jsonl, TensorBoard, train.log):
// tokens/s, model FLOPs utilisation (MFU: achieved training FLOP/s over the device's dense peak,
// from a per-sample FLOPs estimate the model provides), peak memory of the window (device
// memory on CUDA, resident host memory on CPU) and, where NVML is present (loaded at run time),
// the GPU's own utilisation. The Trainer itself logs samples/s and the data-wait /
// communication / compute split of the step. tokens/s is the whole job's, like the Trainer's
// samples/s (over the same window); TFLOP/s and MFU are per device; memory and utilisation are
// this rank's.
//
//   // BERT: training FLOPs = 3 x forward (backward costs two forwards)
//   trainer.add_policy(std::make_shared<frugal::ThroughputPolicy>(frugal::ThroughputOptions()
//       .flops_per_sample(3 * config.forward_flops(384)).tokens_per_sample(384)));

#include <torch/arg.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>

#include "frugal/core/policy.hpp"

namespace frugal {

namespace detail {
class NvmlDevice;
}

struct ThroughputOptions {
  /// Training FLOPs (forward + backward) per sample; 0 = no MFU.
  TORCH_ARG(double, flops_per_sample) = 0.0;
  /// Tokens per sample (sequence models); 0 = no tokens/s.
  TORCH_ARG(double, tokens_per_sample) = 0.0;
  /// Dense peak of one device in TFLOP/s; 0 = from the GPU's name for `half_precision`.
  TORCH_ARG(double, peak_tflops) = 0.0;
  /// The peak to use is the fp16/bf16 tensor-core one (else fp32).
  TORCH_ARG(bool, half_precision) = false;
  /// Read GPU utilisation through NVML when the library is there.
  TORCH_ARG(bool, nvml) = true;

 public:  // TORCH_ARG leaves the struct in private:
  void validate() const;
};

/// Dense peak TFLOP/s of a known GPU (H100/H200, A100, L40S, L4, V100, B200), or nullopt.
std::optional<double> known_peak_tflops(const std::string& device_name, bool half_precision);

class ThroughputPolicy : public Policy {
 public:
  explicit ThroughputPolicy(ThroughputOptions options = {});
  ~ThroughputPolicy() override;
  std::string name() const override { return "throughput"; }
  PolicyPhase phase() const override { return PolicyPhase::observation; }
  void on_fit_begin(const TrainingRun& run) override;
  void collect_metrics(Metrics& metrics) override;
  /// The peak used for MFU, TFLOP/s per device (0 when unknown: MFU is then not logged).
  double peak_tflops() const { return peak_tflops_; }

 private:
  ThroughputOptions options_;
  const TrainingRun* run_ = nullptr;
  torch::Device device_ = torch::kCPU;
  double peak_tflops_ = 0.0;
  std::unique_ptr<detail::NvmlDevice> nvml_;  // null without NVML
};

}  // namespace frugal
