#include "data/detail/batch_buffers.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>

#include "frugal/errors.hpp"

namespace frugal::detail {

bool BatchBuffers::Entry::free() {
  // Only the pool holds the tensor and its memory: no batch, view or copy of it is alive.
  if (tensor.use_count() != 1 || tensor.storage().use_count() != 1) return false;
  if (done) {
    if (!done()) return false;
    done = nullptr;
  }
  return true;
}

torch::Tensor BatchBuffers::acquire(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype, bool pinned) {
  const auto make = [&] { return torch::empty_strided(sizes, strides, torch::TensorOptions().dtype(dtype).pinned_memory(pinned)); };
  std::lock_guard<std::mutex> lock(mutex_);
  for (Entry& e : entries_) {
    if (e.pinned == pinned && e.tensor.scalar_type() == dtype && e.tensor.sizes() == sizes && e.tensor.strides() == strides &&
        e.free()) {
      return e.tensor;
    }
  }
  if (entries_.size() >= capacity_) {
    // Room for the new kind (the last, shorter batch of an epoch, a new batch size): drop a free one.
    const auto spare = std::find_if(entries_.begin(), entries_.end(), [](Entry& e) { return e.free(); });
    if (spare == entries_.end()) return make();  // every kept buffer is in use: this one is not kept
    entries_.erase(spare);
  }
  entries_.push_back({make(), pinned, nullptr});
  return entries_.back().tensor;
}

void BatchBuffers::hold_until(const torch::Tensor& buffer, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Entry& e : entries_) {
    if (e.tensor.is_same(buffer)) {
      e.done = std::move(done);
      return;
    }
  }
}

size_t BatchBuffers::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

torch::Tensor stack_into(const std::vector<torch::Tensor>& parts, BatchBuffers* buffers, bool pinned) {
  const torch::Tensor& first = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].sizes() != first.sizes() || parts[i].scalar_type() != first.scalar_type()) {
      throw Error(c10::str("collate: example ", i, " is ", parts[i].scalar_type(), " ", parts[i].sizes(), " but example 0 is ",
                           first.scalar_type(), " ", first.sizes(), " (a batch needs equal shapes)"));
    }
  }
  if (!first.device().is_cpu()) return torch::stack(parts);  // made on the device already
  std::vector<int64_t> sizes{static_cast<int64_t>(parts.size())};
  sizes.insert(sizes.end(), first.sizes().begin(), first.sizes().end());
  // Slot strides: the parts' own when they are dense (any permutation), else row-major.
  const torch::Tensor dense = first.is_non_overlapping_and_dense() ? first : first.contiguous();
  std::vector<int64_t> strides{first.numel()};
  strides.insert(strides.end(), dense.strides().begin(), dense.strides().end());
  torch::Tensor out = buffers != nullptr ? buffers->acquire(sizes, strides, first.scalar_type(), pinned)
                                         : torch::empty_strided(sizes, strides, first.options().pinned_memory(pinned));
  for (size_t i = 0; i < parts.size(); ++i) out.select(0, static_cast<int64_t>(i)).copy_(parts[i]);
  return out;
}

}  // namespace frugal::detail
