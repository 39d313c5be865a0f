#include "host_memory.hpp"

namespace frugal::detail {

torch::Tensor host_copy(const torch::Tensor& t) {
  if (!t.defined()) return t;
  return t.is_cpu() ? t.detach().clone() : t.detach().to(torch::kCPU);
}

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

}  // namespace frugal::detail
