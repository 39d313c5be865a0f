#pragma once
// BERT self-attention on a GPU over unpadded rows: the flash kernel's variable-length form
// (at::_flash_attention_forward with cumulative sequence lengths, the call PyTorch's nested-tensor
// SDPA makes; its backward is ATen's autograd formula). Query, key and value are strided views of
// the fused projection, so neither padding nor a head-split copy is made. The flash kernel takes
// fp16 or bf16 (autocast) and head sizes up to 256 in multiples of 8; elsewhere the caller pads
// the rows back around at::scaled_dot_product_attention.

#include <torch/types.h>

#include <cstdint>

namespace frugal::detail {

/// Whether the varlen flash kernel can take this projection ([T, 3 * heads * d] on CUDA) and has not failed before.
bool flash_varlen_usable(const torch::Tensor& qkv, int64_t heads);

/// qkv: [T, 3 * hidden], the sequences' rows end to end; cu_seqlens: int32 [N + 1] on the same
/// device (0, l0, l0 + l1, ...); max_len: the longest. Returns the context [T, hidden], or an
/// undefined tensor when the kernel refused (logged once; flash_varlen_usable is false after).
torch::Tensor flash_varlen_attention(const torch::Tensor& qkv, const torch::Tensor& cu_seqlens, int64_t max_len, int64_t heads,
                                     double dropout_p);

}  // namespace frugal::detail
