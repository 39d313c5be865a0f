#include "frugal/base/storage_bytes.hpp"

#include <unordered_set>

namespace frugal {

int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    if (seen.insert(storage).second) bytes += static_cast<int64_t>(storage->nbytes());
  }
  return bytes;
}

}  // namespace frugal
