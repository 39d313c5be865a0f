#pragma once
// BERT self-attention for training on the CPU in fp32, with dropout on the probabilities, as one
// autograd function with a hand-written backward. It computes what SDPA's math path computes, but
// reads query, key and value as strided views of the fused projection and writes the context in
// [N, S, hidden] order and the gradient straight into the projection's layout: no head-split
// copies, no unbind/stack, the 1/sqrt(d) scale and the padding mask folded into the matrix
// multiplies, the dropout mask replayed from its seed rather than stored. Each of those copies
// was a separate pass over the activations; together about 8% of a small BERT's step.

#include <torch/types.h>

#include <cstdint>

namespace frugal::detail {

/// qkv: [N, S, 3 * hidden] (query, key, value projections side by side, heads inside each);
/// real_tokens: bool [N, S], false at padding (or undefined: no padding). Returns the attention
/// context, [N, S, hidden].
torch::Tensor cpu_attention(const torch::Tensor& qkv, const torch::Tensor& real_tokens, int64_t heads, double dropout_p);

}  // namespace frugal::detail
