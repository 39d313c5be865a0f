#include "gelu.hpp"

#include "base/target_clones.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <bit>
#include <cstdint>

namespace frugal::detail {
namespace {

// Phi(v) (the normal CDF) and exp(-v^2 / 2), written without branches or library calls so that the
// loop below vectorises (AVX-512 and AVX2 clones, picked at load time).
__attribute__((always_inline)) inline void normal_cdf_and_exp(float v, float& cdf, float& e) {
  // e = 2^k e^r, r = a - k ln 2 (Cephes' expf); below -87 it is 0 to float precision.
  const float half_square = -0.5f * v * v;
  const float a = half_square < -87.0f ? -87.0f : half_square;
  const float k = (a * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // rounded to nearest
  const float r = (a - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  e = ((p * r * r + r) + 1.0f) * std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  // Phi(-|v|) = erfc(|v| / sqrt 2) / 2 = t P(t) e / 2, t = 1 / (1 + p |v| / sqrt 2): no cancellation in the tail.
  const float t = 1.0f / (1.0f + 0.3275911f * 0.70710678118654752f * (v < 0 ? -v : v));
  const float lower_tail = 0.5f * e * t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  cdf = v < 0 ? lower_tail : 1.0f - lower_tail;
}

// dx = dy (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
FRUGAL_TARGET_CLONES("arch=x86-64-v4", "arch=x86-64-v3", "default")
void gelu_gradients(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float cdf, e;
    normal_cdf_and_exp(x[i], cdf, e);
    dx[i] = dy[i] * (cdf + x[i] * e * 0.39894228040143268f);
  }
}

constexpr int64_t kGrain = 1 << 14;

class CpuGelu : public torch::autograd::Function<CpuGelu> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return torch::gelu(x);  // the forward pass is ATen's own (oneDNN's kernel on x86): the same values
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const torch::Tensor saved = ctx->get_saved_variables()[0];
    // create_graph: the gradient must be differentiable itself, which ATen's formula is.
    if (torch::GradMode::is_enabled()) return {at::gelu_backward(grads[0], saved)};
    const torch::Tensor x = saved.contiguous(), dy = grads[0].contiguous();
    torch::Tensor dx = torch::empty(x.sizes(), x.options());
    const float *in = x.const_data_ptr<float>(), *g = dy.const_data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) { gelu_gradients(in + begin, g + begin, out + begin, end - begin); });
    return {dx};
  }
};

}  // namespace

torch::Tensor gelu(const torch::Tensor& x) {
  const bool trains = torch::GradMode::is_enabled() && x.requires_grad();
  if (!trains || !x.device().is_cpu() || x.scalar_type() != torch::kFloat) return torch::gelu(x);
  return CpuGelu::apply(x);
}

}  // namespace frugal::detail
