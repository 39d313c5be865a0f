#pragma once
// The arithmetic of one element of an 8-bit-state step, shared by the CPU kernel and the CUDA
// kernel so that both compute the same thing: the fp32 update as bitsandbytes' blockwise
// optimizers (and torch.optim) write it, and the nearest code of the dynamic map.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FRUGAL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FRUGAL_HOST_DEVICE inline
#endif

namespace frugal::detail {

/// Adam's per-step constants, rounded to fp32 once from their double values.
struct AdamConstants {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float eps;
  float correction2;  // sqrt(1 - beta2^step)
  float step_size;    // -lr / (1 - beta1^step)
  float decay;        // 1 - lr * weight_decay (decoupled, AdamW), else 1
  float l2;           // weight_decay added to the gradient (Adam), else 0
};

/// torch.optim.SGD's momentum step constants.
struct MomentumConstants {
  float lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first;  // first: the buffer starts as the gradient
};

// m, v: the moments, dequantized; updated in place with the parameter.
FRUGAL_HOST_DEVICE void adam_element(float& p, float g, float& m, float& v, const AdamConstants& c) {
  if (c.l2 != 0.0f) g = g + c.l2 * p;
  m = m * c.beta1 + c.one_minus_beta1 * g;
  v = v * c.beta2 + c.one_minus_beta2 * g * g;
  const float denom = sqrtf(v) / c.correction2 + c.eps;
  p = p * c.decay;
  p = p + c.step_size * (m / denom);
}

FRUGAL_HOST_DEVICE void momentum_element(float& p, float g, float& buffer, const MomentumConstants& c) {
  if (c.weight_decay != 0.0f) g = g + c.weight_decay * p;
  buffer = c.first ? g : buffer * c.momentum + c.one_minus_dampening * g;
  const float d = c.nesterov ? g + c.momentum * buffer : buffer;
  p = p - c.lr * d;
}

/// `below`: the largest index whose code is <= x (0 when none is). The nearest code to x, the
/// lower one on a tie, as bitsandbytes' quantize_block picks it.
FRUGAL_HOST_DEVICE uint8_t nearest_code(const float* map, int below, float x) {
  if (below < 255 && fabsf(x - map[below + 1]) < fabsf(x - map[below])) ++below;
  return static_cast<uint8_t>(below);
}

/// x divided by the block's absolute maximum; an all-zero block is 0, not 0/0.
FRUGAL_HOST_DEVICE float normed(float x, float absmax) { return absmax > 0.0f ? x / absmax : 0.0f; }

// What is not finite stays in its own element (the same on every device): a block's maximum is
// taken over its finite values only, so it stays finite and the block's other values keep their
// codes; the element itself is coded as if clamped, NaN as 0 (its state restarts from 0) and an
// infinity as the end code of its sign (the block's maximum). Its parameter is updated in fp32
// before quantization and goes non-finite, as torch.optim's would, and nothing else does.

/// |x| when x is finite, else 0: what a block's maximum is taken over.
FRUGAL_HOST_DEVICE float finite_magnitude(float x) { return fabsf(x) < INFINITY ? fabsf(x) : 0.0f; }

/// A normed value as it is coded: NaN as 0, clamped to [-1, 1].
FRUGAL_HOST_DEVICE float sanitized(float y) { return y != y ? 0.0f : fminf(fmaxf(y, -1.0f), 1.0f); }

}  // namespace frugal::detail
