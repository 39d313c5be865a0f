#include "dropout.hpp"

#include "base/target_clones.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
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

// Pairs of elements share one 64-bit hash of (seed, pair index), so the mask is the same for any
// thread count. A block's hashes are drawn, then applied, in loops the compiler vectorises (AVX-512
// and AVX2 clones, picked at load time): 3x as fast as one scalar loop doing both.
constexpr int64_t kPairsPerBlock = 256;

// dst[j] = src[j] * scale, or 0 where draw j is below threshold, for the count <= 2 * kPairsPerBlock
// elements from pair `first_pair` on: element 2k draws hash k's low 32 bits, element 2k + 1 its high ones.
template <typename T>
FRUGAL_TARGET_CLONES("arch=x86-64-v4", "arch=x86-64-v3", "default")
void apply_block(const T* src, T* dst, uint64_t seed, int64_t first_pair, int64_t count, uint32_t threshold, T scale) {
  uint32_t draws[2 * kPairsPerBlock];
  for (int64_t k = 0; k < kPairsPerBlock; ++k) {
    const uint64_t hash = splitmix64(seed + static_cast<uint64_t>(first_pair + k));
    draws[2 * k] = static_cast<uint32_t>(hash);
    draws[2 * k + 1] = static_cast<uint32_t>(hash >> 32);
  }
  for (int64_t j = 0; j < count; ++j) dst[j] = draws[j] >= threshold ? static_cast<T>(src[j] * scale) : static_cast<T>(0);
}

// y = dropout(x) forward, and dx = dropout(dy) backward: the same mask, replayed from the seed.
class CpuDropout : public torch::autograd::Function<CpuDropout> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double p) {
    const DropoutStream stream = draw_dropout_stream(p);
    ctx->saved_data["seed"] = static_cast<int64_t>(stream.seed);
    ctx->saved_data["p"] = p;
    return apply_dropout(x, stream);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const DropoutStream stream{static_cast<uint64_t>(ctx->saved_data["seed"].toInt()), ctx->saved_data["p"].toDouble()};
    return {apply_dropout(grads[0], stream), torch::Tensor()};
  }
};

}  // namespace

DropoutStream draw_dropout_stream(double p) {
  auto* generator = at::detail::getDefaultCPUGenerator().get<at::CPUGeneratorImpl>();
  std::lock_guard<std::mutex> lock(generator->mutex_);
  return {generator->random64(), p};
}

torch::Tensor apply_dropout(const torch::Tensor& x, const DropoutStream& stream) {
  // Dropped when the 32-bit draw is below p * 2^32: P(drop) = p to within 2^-32.
  const auto threshold = static_cast<uint32_t>(std::min(4294967295.0, std::floor(stream.p * 4294967296.0)));
  const torch::Tensor in = x.contiguous();
  torch::Tensor out = torch::empty(in.sizes(), in.options());
  const int64_t n = in.numel();
  const uint64_t seed = stream.seed;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "frugal_dropout", [&] {
    const auto* src = in.const_data_ptr<scalar_t>();
    auto* dst = out.data_ptr<scalar_t>();
    const auto scale = static_cast<scalar_t>(1.0 / (1.0 - stream.p));
    at::parallel_for(0, (n + 1) / 2, 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t pair = begin; pair < end; pair += kPairsPerBlock) {
        const int64_t i = 2 * pair;
        apply_block(src + i, dst + i, seed, pair, std::min(2 * std::min(kPairsPerBlock, end - pair), n - i), threshold, scale);
      }
    });
  });
  return out;
}

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p == 0.0) return x;
  if (!x.device().is_cpu() || p >= 1.0) return torch::dropout(x, p, /*train=*/true);
  return CpuDropout::apply(x, p);
}

}  // namespace frugal::detail
