#include "cpu_attention.hpp"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "dropout.hpp"

namespace frugal::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Sequence n's heads of part 0 (query), 1 (key) or 2 (value): [heads, S, d], strided, no copy.
torch::Tensor heads_of(const torch::Tensor& qkv5, int64_t n, int64_t part) { return qkv5[n].select(1, part).transpose(0, 1); }

class CpuAttention : public torch::autograd::Function<CpuAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, const torch::Tensor& real_tokens, int64_t heads,
                               double p) {
    const torch::Tensor qkv = qkv_in.contiguous();
    const int64_t n = qkv.size(0), s = qkv.size(1), hidden = qkv.size(2) / 3, d = hidden / heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const torch::Tensor qkv5 = qkv.view({n, s, 3, heads, d});
    // Scores = scale * Q K^T (+ -inf at padded keys), one batched multiply per sequence.
    torch::Tensor scores = torch::empty({n, heads, s, s}, qkv.options());
    const bool padded = real_tokens.defined() && !real_tokens.all().item<bool>();
    torch::Tensor bias;
    if (padded) {
      bias = torch::zeros({n, 1, 1, s}, qkv.options()).masked_fill_(real_tokens.logical_not().view({n, 1, 1, s}),
                                                                    -std::numeric_limits<double>::infinity());
    }
    for (int64_t i = 0; i < n; ++i) {
      torch::Tensor out = scores[i];
      const torch::Tensor keys_t = heads_of(qkv5, i, 1).transpose(1, 2);
      if (padded) {
        at::baddbmm_out(out, bias[i].expand({heads, s, s}), heads_of(qkv5, i, 0), keys_t, 1.0, scale);
      } else {
        at::baddbmm_out(out, out, heads_of(qkv5, i, 0), keys_t, 0.0, scale);
      }
    }
    const torch::Tensor probs = at::_softmax(scores, -1, false);
    scores.reset();
    const DropoutStream stream = draw_dropout_stream(p);
    const torch::Tensor dropped = apply_dropout(probs, stream);
    // Context, written in [N, S, heads, d] = [N, S, hidden] order.
    torch::Tensor context = torch::empty({n, s, heads, d}, qkv.options());
    for (int64_t i = 0; i < n; ++i) {
      torch::Tensor out = context[i].transpose(0, 1);
      at::bmm_out(out, dropped[i], heads_of(qkv5, i, 2));
    }
    ctx->save_for_backward({qkv, probs, dropped});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["seed"] = static_cast<int64_t>(stream.seed);
    ctx->saved_data["p"] = p;
    return context.view({n, s, hidden});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &qkv = saved[0], &probs = saved[1], &dropped = saved[2];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const DropoutStream stream{static_cast<uint64_t>(ctx->saved_data["seed"].toInt()), ctx->saved_data["p"].toDouble()};
    const int64_t n = qkv.size(0), s = qkv.size(1), hidden = qkv.size(2) / 3, d = hidden / heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const torch::Tensor qkv5 = qkv.view({n, s, 3, heads, d});
    const torch::Tensor grad = grads[0].contiguous().view({n, s, heads, d});
    torch::Tensor grad_qkv = torch::empty({n, s, 3, heads, d}, qkv.options());
    // dV = P_dropped^T dC and dP_dropped = dC V^T.
    torch::Tensor grad_dropped = torch::empty({n, heads, s, s}, qkv.options());
    for (int64_t i = 0; i < n; ++i) {
      const torch::Tensor grad_context = grad[i].transpose(0, 1);
      torch::Tensor grad_value = heads_of(grad_qkv, i, 2), grad_probs = grad_dropped[i];
      at::bmm_out(grad_value, dropped[i].transpose(1, 2), grad_context);
      at::bmm_out(grad_probs, grad_context, heads_of(qkv5, i, 2).transpose(1, 2));
    }
    // Through the dropout (the same mask, replayed) and the softmax.
    const torch::Tensor grad_scores = at::_softmax_backward_data(apply_dropout(grad_dropped, stream), probs, -1, probs.scalar_type());
    grad_dropped.reset();
    // dQ = scale dS K and dK = scale dS^T Q.
    for (int64_t i = 0; i < n; ++i) {
      torch::Tensor grad_query = heads_of(grad_qkv, i, 0), grad_key = heads_of(grad_qkv, i, 1);
      at::baddbmm_out(grad_query, grad_query, grad_scores[i], heads_of(qkv5, i, 1), 0.0, scale);
      at::baddbmm_out(grad_key, grad_key, grad_scores[i].transpose(1, 2), heads_of(qkv5, i, 0), 0.0, scale);
    }
    return {grad_qkv.view({n, s, 3 * hidden}), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor cpu_attention(const torch::Tensor& qkv, const torch::Tensor& real_tokens, int64_t heads, double dropout_p) {
  return CpuAttention::apply(qkv, real_tokens, heads, dropout_p);
}

}  // namespace frugal::detail
