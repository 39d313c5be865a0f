#pragma once
// BERT self-attention for training on the CPU in fp32, with dropout on the probabilities, as one
// autograd function with a hand-written backward. It computes what SDPA's math path computes, but
// reads query, key and value as strided views of the fused projection and writes the context
// straight into row order and the gradient straight into the projection's layout: no head-split
// copies, no unbind/stack, the 1/sqrt(d) scale folded into the matrix multiplies, the dropout mask
// replayed from its seed rather than stored. Each of those copies was a separate pass over the
// activations; together about 8% of a small BERT's step.
//
// Padding is never multiplied: each sequence attends over its own real keys only (a span of
// rows), so a padded batch skips its masked keys and an unpadded one (the real tokens of every
// sequence packed end to end) has no padding at all.

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace frugal::detail {

/// Where each sequence lies in the rows of a [rows, 3 * hidden] projection: sequence i's queries
/// are rows [offsets[i], offsets[i] + queries[i]), its keys and values the first keys[i] of those.
struct AttentionSpans {
  std::vector<int64_t> offsets, queries, keys;
};

/// A padded batch [N, S]: every row is a query, the keys are the real tokens. Only when each row's
/// real tokens are a non-empty prefix (padding on the right, as BERT tokenizers pad); otherwise
/// nullopt, and the caller masks instead.
std::optional<AttentionSpans> padded_spans(const torch::Tensor& real_tokens);

/// Sequences of the given lengths packed end to end, without padding.
AttentionSpans packed_spans(const std::vector<int64_t>& lengths);

/// qkv: [rows, 3 * hidden] (query, key, value projections side by side, heads inside each).
/// Returns the attention context, [rows, hidden].
torch::Tensor cpu_attention(const torch::Tensor& qkv, const AttentionSpans& spans, int64_t heads, double dropout_p);

}  // namespace frugal::detail
