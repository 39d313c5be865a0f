#include "dropout.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <mutex>

namespace frugal::detail {
namespace {

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The scaled keep mask: 1 / (1 - p) where kept, 0 where dropped; two 32-bit draws per hash.
torch::Tensor cpu_mask(const torch::Tensor& like, double p) {
  uint64_t seed = 0;
  {
    auto* generator = at::detail::getDefaultCPUGenerator().get<at::CPUGeneratorImpl>();
    std::lock_guard<std::mutex> lock(generator->mutex_);
    seed = generator->random64();
  }
  // Dropped when the 32-bit draw is below p * 2^32: P(drop) = p to within 2^-32.
  const auto threshold = static_cast<uint32_t>(std::min(4294967295.0, std::floor(p * 4294967296.0)));
  torch::Tensor mask = torch::empty(like.sizes(), like.options().memory_format(torch::MemoryFormat::Contiguous));
  const int64_t n = mask.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, mask.scalar_type(), "frugal_dropout_mask", [&] {
    auto* out = mask.data_ptr<scalar_t>();
    const auto scale = static_cast<scalar_t>(1.0 / (1.0 - p));
    const auto zero = static_cast<scalar_t>(0);
    // Pairs of elements share one 64-bit hash of (seed, pair index): the same mask for any thread count.
    at::parallel_for(0, (n + 1) / 2, 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t pair = begin; pair < end; ++pair) {
        const uint64_t r = splitmix64(seed + static_cast<uint64_t>(pair));
        const int64_t i = 2 * pair;
        out[i] = static_cast<uint32_t>(r) >= threshold ? scale : zero;
        if (i + 1 < n) out[i + 1] = static_cast<uint32_t>(r >> 32) >= threshold ? scale : zero;
      }
    });
  });
  return mask;
}

}  // namespace

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p == 0.0) return x;
  if (!x.device().is_cpu() || p >= 1.0) return torch::dropout(x, p, /*train=*/true);
  return x * cpu_mask(x, p);
}

}  // namespace frugal::detail
