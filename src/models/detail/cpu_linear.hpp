#pragma once
// torch::linear on the CPU through oneDNN (frugal::CpuGemm::onednn): the forward and both
// backward matrix multiplies of a linear layer, on LibTorch's own dense tensors (no conversion to
// oneDNN's layout), with at::linear's result and gradients. Anything else goes to torch::linear:
// CUDA, dtypes other than float32, CPU autocast (which must see at::linear to cast it), and
// multiplies too small to repay oneDNN's call (about 20 us against MKL's 1).

#include <torch/types.h>

namespace frugal::detail {

/// Whether linear(x, weight, bias) takes oneDNN.
bool onednn_linear_usable(const torch::Tensor& x, const torch::Tensor& weight);

/// Whether LibTorch's oneDNN matmul takes float32 on this CPU (the wheel's refuses it on CPUs
/// without avx512bw/vl/dq or avx_ne_convert); elsewhere every product goes through ATen's calls.
bool onednn_matmul_works_here();

/// x [..., in] @ weight[out, in]^T + bias [out] (bias may be undefined).
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// out = alpha * a @ b for batches of matrices ([batch, m, k] @ [batch, k, n], each dense or with
/// its last two dimensions transposed), through oneDNN when it is chosen and all are float32,
/// else at::baddbmm (MKL). For batches whose shapes repeat: oneDNN builds a kernel per shape.
void batched_multiply(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& out, double alpha = 1.0);

}  // namespace frugal::detail
