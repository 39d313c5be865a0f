// The CUDA side of quantized_steps.hpp: one thread block of 256 threads a quantization block,
// one element a thread; the maps in shared memory, the block's absolute maximum by a block
// reduction, the nearest code by a binary search. Everything on the current stream. Compiled
// without FMA contraction (src/CMakeLists.txt), so that each element's arithmetic rounds as the
// CPU kernel's does and both devices give the same bits.
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "frugal/optim/state_quantization.hpp"
#include "optim/detail/quantized_steps.hpp"

namespace frugal::detail {
namespace {

constexpr int kThreads = static_cast<int>(kQuantizationBlock);
static_assert(kThreads % 32 == 0, "whole warps");

// The code of x / top, as CodeTable::code_of gives it on the CPU.
__device__ __forceinline__ uint8_t quantize_on_device(const float* map, float x, float top) {
  x = sanitized(normed(x, top));
  // The largest index whose code is <= x (0 when none is), then the nearer neighbour.
  int lo = 0, hi = 256;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (map[mid] <= x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return nearest_code(map, lo, x);
}

// The block's maximum of finite_magnitude(x), in every thread (quantized_math.hpp: what is not
// finite is left out, as on the CPU).
__device__ __forceinline__ float block_max(float x, float* scratch) {
  float value = finite_magnitude(x);
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float top = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) top = fmaxf(top, scratch[w]);
  __syncthreads();  // scratch is reused by the next reduction
  return top;
}

__device__ __forceinline__ void load_map(float* shared, const float* map) {
  shared[threadIdx.x] = map[threadIdx.x];
}

__global__ void quantize_kernel(const float* __restrict__ in, const float* __restrict__ map, uint8_t* __restrict__ codes,
                                float* __restrict__ absmax, int64_t n) {
  __shared__ float smap[256];
  __shared__ float scratch[kThreads / 32];
  load_map(smap, map);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool live = i < n;
  const float x = live ? in[i] : 0.0f;
  __syncthreads();
  const float top = block_max(x, scratch);
  if (threadIdx.x == 0) absmax[blockIdx.x] = top;
  if (live) codes[i] = quantize_on_device(smap, x, top);
}

__global__ void dequantize_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ absmax, const float* __restrict__ map,
                                  float* __restrict__ out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) out[i] = map[codes[i]] * absmax[blockIdx.x];
}

template <typename scalar_t>
__global__ void adam_kernel(scalar_t* __restrict__ param, const scalar_t* __restrict__ grad, uint8_t* __restrict__ m_codes,
                            float* __restrict__ m_absmax, uint8_t* __restrict__ v_codes, float* __restrict__ v_absmax,
                            const float* __restrict__ signed_map, const float* __restrict__ unsigned_map, AdamConstants c, int64_t n) {
  __shared__ float smap[256], umap[256];
  __shared__ float scratch[kThreads / 32];
  load_map(smap, signed_map);
  load_map(umap, unsigned_map);
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool live = i < n;
  float m = 0.0f, v = 0.0f;
  if (live) {
    float p = static_cast<float>(param[i]);
    m = smap[m_codes[i]] * m_absmax[blockIdx.x];
    v = umap[v_codes[i]] * v_absmax[blockIdx.x];
    adam_element(p, static_cast<float>(grad[i]), m, v, c);
    param[i] = static_cast<scalar_t>(p);
  }
  const float m_top = block_max(m, scratch);
  const float v_top = block_max(v, scratch);
  if (threadIdx.x == 0) {
    m_absmax[blockIdx.x] = m_top;
    v_absmax[blockIdx.x] = v_top;
  }
  if (live) {
    m_codes[i] = quantize_on_device(smap, m, m_top);
    v_codes[i] = quantize_on_device(umap, v, v_top);
  }
}

template <typename scalar_t>
__global__ void momentum_kernel(scalar_t* __restrict__ param, const scalar_t* __restrict__ grad, uint8_t* __restrict__ codes,
                                float* __restrict__ absmax, const float* __restrict__ signed_map, MomentumConstants c, int64_t n) {
  __shared__ float smap[256];
  __shared__ float scratch[kThreads / 32];
  load_map(smap, signed_map);
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool live = i < n;
  float buffer = 0.0f;
  if (live) {
    float p = static_cast<float>(param[i]);
    buffer = smap[codes[i]] * absmax[blockIdx.x];
    momentum_element(p, static_cast<float>(grad[i]), buffer, c);
    param[i] = static_cast<scalar_t>(p);
  }
  const float top = block_max(buffer, scratch);
  if (threadIdx.x == 0) absmax[blockIdx.x] = top;
  if (live) codes[i] = quantize_on_device(smap, buffer, top);
}

unsigned int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  TORCH_CHECK(blocks <= 0x7fffffff, "8-bit optimizer state: a tensor of ", n, " elements is too large for one launch");
  return static_cast<unsigned int>(blocks);
}

}  // namespace

void quantize_blockwise_cuda(const torch::Tensor& values, const torch::Tensor& map, QuantizedValues& out) {
  const c10::cuda::CUDAGuard guard(values.device());
  const int64_t n = values.numel();
  if (n == 0) return;
  quantize_kernel<<<grid_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      values.data_ptr<float>(), map.data_ptr<float>(), out.codes.data_ptr<uint8_t>(), out.absmax.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void dequantize_blockwise_cuda(const QuantizedValues& q, const torch::Tensor& map, torch::Tensor& out) {
  const c10::cuda::CUDAGuard guard(q.codes.device());
  const int64_t n = q.codes.numel();
  if (n == 0) return;
  dequantize_kernel<<<grid_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      q.codes.data_ptr<uint8_t>(), q.absmax.data_ptr<float>(), map.data_ptr<float>(), out.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void adam_step_8bit_cuda(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& m, QuantizedValues& v,
                         const torch::Tensor& signed_map, const torch::Tensor& unsigned_map, const AdamConstants& c) {
  const c10::cuda::CUDAGuard guard(param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, param.scalar_type(), "adam_step_8bit_cuda", [&] {
    adam_kernel<scalar_t><<<grid_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        param.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(), m.codes.data_ptr<uint8_t>(), m.absmax.data_ptr<float>(),
        v.codes.data_ptr<uint8_t>(), v.absmax.data_ptr<float>(), signed_map.data_ptr<float>(), unsigned_map.data_ptr<float>(), c, n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void momentum_step_8bit_cuda(const torch::Tensor& param, const torch::Tensor& grad, QuantizedValues& buffer,
                             const torch::Tensor& signed_map, const MomentumConstants& c) {
  const c10::cuda::CUDAGuard guard(param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, param.scalar_type(), "momentum_step_8bit_cuda", [&] {
    momentum_kernel<scalar_t><<<grid_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        param.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(), buffer.codes.data_ptr<uint8_t>(), buffer.absmax.data_ptr<float>(),
        signed_map.data_ptr<float>(), c, n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace frugal::detail
