#include "frugal/tooling/throughput.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/StringUtil.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <algorithm>

#include "frugal/core/training_run.hpp"
#include "frugal/log.hpp"
#include "base/resident_memory.hpp"
#include "tooling/detail/nvml.hpp"

namespace frugal {

void ThroughputOptions::validate() const {
  if (!(flops_per_sample() >= 0)) throw OptionError("flops_per_sample", c10::str("flops_per_sample must be >= 0, got ", flops_per_sample()));
  if (!(tokens_per_sample() >= 0)) throw OptionError("tokens_per_sample", c10::str("tokens_per_sample must be >= 0, got ", tokens_per_sample()));
  if (!(peak_tflops() >= 0)) throw OptionError("peak_tflops", c10::str("peak_tflops must be >= 0, got ", peak_tflops()));
}

std::optional<double> known_peak_tflops(const std::string& device_name, bool half_precision) {
  // Dense (no sparsity) figures from the vendor's data sheets: {name part, fp16/bf16, fp32}.
  struct Peak {
    const char* name;
    double half;
    double fp32;
  };
  static const Peak peaks[] = {
      {"B200", 2250.0, 80.0}, {"H200", 989.4, 66.9}, {"H100 PCIe", 756.0, 51.2}, {"H100", 989.4, 66.9},
      {"A100", 312.0, 19.5},  {"L40S", 362.1, 91.6}, {"L4", 121.0, 30.3},       {"V100", 125.0, 15.7},
  };
  for (const Peak& p : peaks) {  // the first match: "H100 PCIe" before "H100"
    if (device_name.find(p.name) != std::string::npos) return half_precision ? p.half : p.fp32;
  }
  return std::nullopt;
}

ThroughputPolicy::ThroughputPolicy(ThroughputOptions options) : options_(std::move(options)) { options_.validate(); }
ThroughputPolicy::~ThroughputPolicy() = default;

void ThroughputPolicy::on_fit_begin(const TrainingRun& run) {
  run_ = &run;
  device_ = run.device();
  peak_tflops_ = options_.peak_tflops();
  if (device_.is_cuda()) {
    const int index = device_.has_index() ? device_.index() : 0;
    const std::string gpu = at::cuda::getDeviceProperties(index)->name;
    if (peak_tflops_ == 0) peak_tflops_ = known_peak_tflops(gpu, options_.half_precision()).value_or(0.0);
    if (options_.nvml()) {
      char bus_id[32] = {};
      if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), index) == cudaSuccess) nvml_ = detail::NvmlDevice::open(bus_id);
    }
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
    log::info(c10::str("throughput: ", gpu, peak_tflops_ > 0 ? c10::str(", peak ", peak_tflops_, " TFLOP/s") : ", peak unknown (no MFU)",
                       nvml_ ? ", NVML utilisation" : ""));
  } else {
    detail::reset_peak_resident();
  }
  if (options_.flops_per_sample() > 0 && peak_tflops_ == 0) {
    log::info("throughput: no peak TFLOP/s for this device (set throughput.peak_tflops): MFU is not logged");
  }
}

void ThroughputPolicy::collect_metrics(Metrics& metrics) {
  const double samples_per_s = run_->samples_per_s();  // the job's, over the Trainer's log window
  if (options_.tokens_per_sample() > 0) metrics["tokens_per_s"] = samples_per_s * options_.tokens_per_sample();
  if (options_.flops_per_sample() > 0) {
    const double tflops = samples_per_s / static_cast<double>(run_->world_size()) * options_.flops_per_sample() / 1e12;
    metrics["tflops"] = tflops;
    if (peak_tflops_ > 0) metrics["mfu"] = tflops / peak_tflops_;
  }
  if (device_.is_cuda()) {
    const auto index = static_cast<c10::DeviceIndex>(device_.has_index() ? device_.index() : 0);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    metrics["peak_memory_mb"] =
        static_cast<double>(stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) / (1 << 20);
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    if (nvml_) {
      if (auto util = nvml_->gpu_utilization()) metrics["gpu_utilization"] = *util / 100.0;
    }
  } else {
    metrics["peak_memory_mb"] = static_cast<double>(detail::peak_resident_bytes()) / (1 << 20);
    detail::reset_peak_resident();
  }
}

}  // namespace frugal
