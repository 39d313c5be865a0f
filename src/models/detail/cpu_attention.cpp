#include "cpu_attention.hpp"

#include <torch/torch.h>

#include <cmath>

#include "cpu_linear.hpp"
#include "dropout.hpp"

namespace frugal::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows [offset, offset + count) of part 0 (query), 1 (key) or 2 (value), as [heads, count, d]:
// a strided view, no copy. `qkv` is [rows, 3 * heads * d], contiguous.
torch::Tensor heads_of(const torch::Tensor& qkv, int64_t offset, int64_t count, int64_t part, int64_t heads) {
  return qkv.narrow(0, offset, count).view({count, 3, heads, -1}).select(1, part).transpose(0, 1);
}

// Rows [offset, offset + count) of a [rows, heads * d] tensor as [heads, count, d].
torch::Tensor rows_by_head(const torch::Tensor& x, int64_t offset, int64_t count, int64_t heads) {
  return x.narrow(0, offset, count).view({count, heads, -1}).transpose(0, 1);
}

// The scores of every sequence, [heads, queries, keys] each, end to end in one flat buffer, so
// that the dropout mask covers them all with one stream.
struct ScoreLayout {
  std::vector<int64_t> begin;
  int64_t total = 0;
  ScoreLayout(const AttentionSpans& spans, int64_t heads) {
    for (size_t i = 0; i < spans.offsets.size(); ++i) {
      begin.push_back(total);
      total += heads * spans.queries[i] * spans.keys[i];
    }
  }
  torch::Tensor of(const torch::Tensor& flat, const AttentionSpans& spans, size_t i, int64_t heads) const {
    return flat.narrow(0, begin[i], heads * spans.queries[i] * spans.keys[i]).view({heads, spans.queries[i], spans.keys[i]});
  }
};

// The length of every sequence when all are packed end to end with the same length and no
// padding (fixed-length batches), else 0.
int64_t common_length(const AttentionSpans& spans, int64_t rows) {
  const int64_t length = spans.queries.empty() ? 0 : spans.queries[0];
  for (size_t i = 0; i < spans.offsets.size(); ++i) {
    if (spans.queries[i] != length || spans.keys[i] != length || spans.offsets[i] != static_cast<int64_t>(i) * length) return 0;
  }
  return length * static_cast<int64_t>(spans.offsets.size()) == rows ? length : 0;
}

// [n * length, heads * d] rows as [n * heads, length, d], contiguous, and back. One copy each way
// lets every sequence and head go through one batched multiply with dense operands, one shape
// for oneDNN to build a kernel for (docs/bert.md has the timings).
torch::Tensor to_heads(const torch::Tensor& rows, int64_t n, int64_t length, int64_t heads) {
  return rows.view({n, length, heads, -1}).permute({0, 2, 1, 3}).reshape({n * heads, length, -1});
}
torch::Tensor to_rows(const torch::Tensor& by_head, int64_t n, int64_t length, int64_t heads) {
  return by_head.view({n, heads, length, -1}).permute({0, 2, 1, 3}).reshape({n * length, -1});
}

class CpuAttention : public torch::autograd::Function<CpuAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, const AttentionSpans& spans, int64_t heads, double p) {
    const torch::Tensor qkv = qkv_in.contiguous();
    const int64_t hidden = qkv.size(1) / 3;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hidden / heads));
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["p"] = p;
    if (const int64_t length = common_length(spans, qkv.size(0)); length > 0) {
      return forward_batched(ctx, qkv, static_cast<int64_t>(spans.offsets.size()), length, heads, scale, p);
    }
    const ScoreLayout layout(spans, heads);
    const size_t n = spans.offsets.size();
    // Scores = scale * Q K^T over the sequence's own keys, one batched multiply per sequence.
    torch::Tensor scores = torch::empty({layout.total}, qkv.options());
    torch::Tensor probs = torch::empty({layout.total}, qkv.options());
    for (size_t i = 0; i < n; ++i) {
      torch::Tensor out = layout.of(scores, spans, i, heads);
      at::baddbmm_out(out, out, heads_of(qkv, spans.offsets[i], spans.queries[i], 0, heads),
                      heads_of(qkv, spans.offsets[i], spans.keys[i], 1, heads).transpose(1, 2), 0.0, scale);
      torch::Tensor probs_i = layout.of(probs, spans, i, heads);
      at::_softmax_out(probs_i, out, -1, false);
    }
    scores.reset();
    const DropoutStream stream = draw_dropout_stream(p);
    const torch::Tensor dropped = apply_dropout(probs, stream);
    torch::Tensor context = torch::empty({qkv.size(0), hidden}, qkv.options());
    for (size_t i = 0; i < n; ++i) {
      torch::Tensor out = rows_by_head(context, spans.offsets[i], spans.queries[i], heads);
      at::bmm_out(out, layout.of(dropped, spans, i, heads), heads_of(qkv, spans.offsets[i], spans.keys[i], 2, heads));
    }
    ctx->save_for_backward({qkv, probs, dropped});
    ctx->saved_data["seed"] = static_cast<int64_t>(stream.seed);
    ctx->saved_data["offsets"] = spans.offsets;
    ctx->saved_data["queries"] = spans.queries;
    ctx->saved_data["keys"] = spans.keys;
    return context;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &qkv = saved[0], &probs = saved[1], &dropped = saved[2];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const DropoutStream stream{static_cast<uint64_t>(ctx->saved_data["seed"].toInt()), ctx->saved_data["p"].toDouble()};
    if (ctx->saved_data.count("length") > 0) return backward_batched(ctx, grads[0]);
    const AttentionSpans spans{ctx->saved_data["offsets"].toIntVector(), ctx->saved_data["queries"].toIntVector(),
                               ctx->saved_data["keys"].toIntVector()};
    const int64_t hidden = qkv.size(1) / 3;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hidden / heads));
    const ScoreLayout layout(spans, heads);
    const size_t n = spans.offsets.size();
    const torch::Tensor grad = grads[0].contiguous();
    torch::Tensor grad_qkv = torch::empty_like(qkv);
    // dV = P_dropped^T dC and dP_dropped = dC V^T.
    torch::Tensor grad_dropped = torch::empty({layout.total}, qkv.options());
    for (size_t i = 0; i < n; ++i) {
      const int64_t at = spans.offsets[i], q = spans.queries[i], k = spans.keys[i];
      // Padded rows are queries but not keys: no key or value gradient.
      if (k < q) grad_qkv.narrow(0, at + k, q - k).narrow(1, hidden, 2 * hidden).zero_();
      const torch::Tensor grad_context = rows_by_head(grad, at, q, heads);
      const torch::Tensor dropped_i = layout.of(dropped, spans, i, heads);
      torch::Tensor grad_value = heads_of(grad_qkv, at, k, 2, heads), grad_dropped_i = layout.of(grad_dropped, spans, i, heads);
      at::bmm_out(grad_value, dropped_i.transpose(1, 2), grad_context);
      at::bmm_out(grad_dropped_i, grad_context, heads_of(qkv, at, k, 2, heads).transpose(1, 2));
    }
    // Through the dropout (the same mask, replayed) and the softmax; then dQ = scale dS K and dK = scale dS^T Q.
    const torch::Tensor grad_probs = apply_dropout(grad_dropped, stream);
    grad_dropped.reset();
    torch::Tensor grad_scores = torch::empty({layout.total}, qkv.options());
    for (size_t i = 0; i < n; ++i) {
      const int64_t at = spans.offsets[i], q = spans.queries[i], k = spans.keys[i];
      torch::Tensor grad_scores_i = layout.of(grad_scores, spans, i, heads);
      at::_softmax_backward_data_out(grad_scores_i, layout.of(grad_probs, spans, i, heads), layout.of(probs, spans, i, heads), -1,
                                     probs.scalar_type());
      torch::Tensor grad_query = heads_of(grad_qkv, at, q, 0, heads), grad_key = heads_of(grad_qkv, at, k, 1, heads);
      at::baddbmm_out(grad_query, grad_query, grad_scores_i, heads_of(qkv, at, k, 1, heads), 0.0, scale);
      at::baddbmm_out(grad_key, grad_key, grad_scores_i.transpose(1, 2), heads_of(qkv, at, q, 0, heads), 0.0, scale);
    }
    return {grad_qkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

 private:
  // n sequences of `length` rows each: the same math in one batched multiply per product. The
  // scores are laid out as the per-sequence path lays them out ([n, heads, length, length]), so
  // the dropout mask is the same.
  static torch::Tensor forward_batched(AutogradContext* ctx, const torch::Tensor& qkv, int64_t n, int64_t length, int64_t heads,
                                       double scale, double p) {
    const int64_t hidden = qkv.size(1) / 3;
    // [3, n * heads, length, d]: query, key and value by head.
    const torch::Tensor by_head =
        qkv.view({n, length, 3, heads, -1}).permute({2, 0, 3, 1, 4}).reshape({3, n * heads, length, hidden / heads});
    const torch::Tensor query = by_head[0], key = by_head[1], value = by_head[2];
    torch::Tensor scores = torch::empty({n * heads, length, length}, qkv.options());
    batched_multiply(query, key.transpose(1, 2), scores, scale);
    const torch::Tensor probs = at::_softmax(scores, -1, false);
    scores.reset();
    const DropoutStream stream = draw_dropout_stream(p);
    const torch::Tensor dropped = apply_dropout(probs, stream);
    torch::Tensor context = torch::empty_like(query);
    batched_multiply(dropped, value, context);
    context = to_rows(context, n, length, heads);
    ctx->save_for_backward({by_head, probs, dropped});
    ctx->saved_data["seed"] = static_cast<int64_t>(stream.seed);
    ctx->saved_data["length"] = length;
    return context;
  }

  static variable_list backward_batched(AutogradContext* ctx, const torch::Tensor& grad) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &by_head = saved[0], &probs = saved[1], &dropped = saved[2];
    const int64_t heads = ctx->saved_data["heads"].toInt(), length = ctx->saved_data["length"].toInt();
    const int64_t n = by_head.size(1) / heads, d = by_head.size(3);
    const DropoutStream stream{static_cast<uint64_t>(ctx->saved_data["seed"].toInt()), ctx->saved_data["p"].toDouble()};
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const torch::Tensor grad_context = to_heads(grad.contiguous(), n, length, heads);
    torch::Tensor grad_by_head = torch::empty_like(by_head);
    // dV = P_dropped^T dC, dP_dropped = dC V^T; through the dropout and the softmax; dQ = scale dS K, dK = scale dS^T Q.
    batched_multiply(dropped.transpose(1, 2), grad_context, grad_by_head[2]);
    torch::Tensor grad_dropped = torch::empty_like(probs);
    batched_multiply(grad_context, by_head[2].transpose(1, 2), grad_dropped);
    const torch::Tensor grad_probs = apply_dropout(grad_dropped, stream);
    grad_dropped.reset();
    const torch::Tensor grad_scores = at::_softmax_backward_data(grad_probs, probs, -1, probs.scalar_type());
    batched_multiply(grad_scores, by_head[1], grad_by_head[0], scale);
    batched_multiply(grad_scores.transpose(1, 2), by_head[0], grad_by_head[1], scale);
    // Back to the projection's layout, [n * length, 3 * hidden].
    const torch::Tensor grad_qkv = grad_by_head.view({3, n, heads, length, d}).permute({1, 3, 0, 2, 4}).reshape({n * length, 3 * heads * d});
    return {grad_qkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::optional<AttentionSpans> padded_spans(const torch::Tensor& real_tokens) {
  const torch::Tensor real = real_tokens.to(torch::kCPU, torch::kBool);
  const int64_t n = real.size(0), s = real.size(1);
  const torch::Tensor lengths = real.sum(1);
  // A prefix mask is exactly position < length.
  if (!real.equal(torch::arange(s).unsqueeze(0).lt(lengths.unsqueeze(1))) || lengths.min().item<int64_t>() == 0) return std::nullopt;
  AttentionSpans spans;
  const auto* length = lengths.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    spans.offsets.push_back(i * s);
    spans.queries.push_back(s);
    spans.keys.push_back(length[i]);
  }
  return spans;
}

AttentionSpans packed_spans(const std::vector<int64_t>& lengths) {
  AttentionSpans spans;
  int64_t at = 0;
  for (const int64_t length : lengths) {
    spans.offsets.push_back(at);
    spans.queries.push_back(length);
    spans.keys.push_back(length);
    at += length;
  }
  return spans;
}

torch::Tensor cpu_attention(const torch::Tensor& qkv, const AttentionSpans& spans, int64_t heads, double dropout_p) {
  return CpuAttention::apply(qkv, spans, heads, dropout_p);
}

}  // namespace frugal::detail
