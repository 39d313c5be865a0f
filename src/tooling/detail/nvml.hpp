#pragma once
// NVML, opened with dlopen so that Frugal neither links against nor requires the driver's
// management library: absent library, symbol or device = no figures, never an error.

#include <memory>
#include <optional>
#include <string>

namespace frugal::detail {

class NvmlDevice {
 public:
  /// The device with this PCI bus id ("0000:3B:00.0"), or nullptr when NVML cannot be used.
  static std::unique_ptr<NvmlDevice> open(const std::string& pci_bus_id);
  ~NvmlDevice();
  /// Percent of the last sample period in which a kernel ran.
  std::optional<double> gpu_utilization() const;

 private:
  struct Api;
  NvmlDevice(std::shared_ptr<const Api> api, void* handle) : api_(std::move(api)), handle_(handle) {}
  std::shared_ptr<const Api> api_;
  void* handle_;
};

}  // namespace frugal::detail
