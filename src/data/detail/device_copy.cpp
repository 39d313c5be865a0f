#include "data/detail/device_copy.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <optional>

#include "data/detail/batch_buffers.hpp"

namespace frugal::detail {
namespace {

void for_each_tensor(const Batch& batch, const std::function<void(const torch::Tensor&)>& f) {
  if (batch.input.defined()) f(batch.input);
  if (batch.target.defined()) f(batch.target);
  for (const auto& [name, tensor] : batch.extra) {
    if (tensor.defined()) f(tensor);
  }
}

// One side stream per worker thread and device, from the pool (never the default stream).
c10::cuda::CUDAStream side_stream(c10::DeviceIndex index) {
  thread_local std::optional<c10::cuda::CUDAStream> side;
  if (!side || side->device_index() != index) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  return *side;
}

c10::DeviceIndex index_of(const torch::Device& device) { return device.has_index() ? device.index() : c10::cuda::current_device(); }

}  // namespace

Batch on_side_stream(const torch::Device& device, const std::function<Batch()>& make) {
  const c10::DeviceIndex index = index_of(device);
  c10::cuda::CUDAGuard device_guard(index);
  c10::cuda::CUDAStreamGuard stream_guard(side_stream(index));
  return make();
}

PreparedBatch copy_to_device_async(const Batch& batch, const torch::Device& device, BatchBuffers* buffers) {
  const c10::DeviceIndex index = index_of(device);
  c10::cuda::CUDAGuard device_guard(index);
  const c10::cuda::CUDAStream side = side_stream(index);
  Batch on_device;
  auto copied = std::make_shared<at::cuda::CUDAEvent>();
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    on_device = batch.pin_memory().to(torch::Device(torch::kCUDA, index), /*non_blocking=*/true);
    copied->record(side);
  }
  // The copy reads the host batch after this returns: its reused buffers wait for the event.
  if (buffers != nullptr) {
    for_each_tensor(batch, [&](const torch::Tensor& t) { buffers->hold_until(t, [copied] { return copied->query(); }); });
  }
  PreparedBatch prepared{on_device, {}};
  prepared.before_use = [copied, on_device, index] {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
    copied->block(current);
    for_each_tensor(on_device, [&](const torch::Tensor& t) { t.record_stream(current.unwrap()); });
  };
  return prepared;
}

}  // namespace frugal::detail
