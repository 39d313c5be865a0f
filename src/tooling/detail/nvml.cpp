#include "nvml.hpp"

#include <dlfcn.h>

namespace frugal::detail {

// The handful of NVML entry points used, with their C signatures (nvml.h; stable ABI).
struct NvmlDevice::Api {
  struct Utilization {
    unsigned int gpu;
    unsigned int memory;
  };
  void* library = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_pci_bus_id)(const char*, void**) = nullptr;
  int (*utilization)(void*, Utilization*) = nullptr;
  ~Api() {
    if (shutdown) shutdown();
    if (library) dlclose(library);
  }
};

std::unique_ptr<NvmlDevice> NvmlDevice::open(const std::string& pci_bus_id) {
  auto api = std::make_shared<Api>();
  api->library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->library) return nullptr;
  auto load = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->library, name));
    return fn != nullptr;
  };
  if (!load(api->init, "nvmlInit_v2") || !load(api->by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !load(api->utilization, "nvmlDeviceGetUtilizationRates")) {
    return nullptr;
  }
  if (api->init() != 0) return nullptr;
  load(api->shutdown, "nvmlShutdown");  // only after a successful init
  void* handle = nullptr;
  if (api->by_pci_bus_id(pci_bus_id.c_str(), &handle) != 0 || handle == nullptr) return nullptr;
  return std::unique_ptr<NvmlDevice>(new NvmlDevice(std::move(api), handle));
}

NvmlDevice::~NvmlDevice() = default;

std::optional<double> NvmlDevice::gpu_utilization() const {
  Api::Utilization u{};
  if (api_->utilization(handle_, &u) != 0) return std::nullopt;
  return static_cast<double>(u.gpu);
}

}  // namespace frugal::detail
