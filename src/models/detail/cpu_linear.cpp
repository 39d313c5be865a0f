#include "cpu_linear.hpp"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <initializer_list>
#include <optional>

#include "frugal/models/cpu_gemm.hpp"

namespace at::native {
// Exported by libtorch_cpu (TORCH_API), but its header (ATen/native/mkldnn/Matmul.h) is not in the
// wheel. result = beta * result + alpha * mat1 @ mat2 through oneDNN, on strided dense 2-D tensors;
// float32 is computed in float32 unless torch.backends.mkldnn's matmul precision is lowered.
TORCH_API void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& result, float beta, float alpha);
}  // namespace at::native

namespace frugal {
namespace detail {
namespace {

// Below this many multiply-adds oneDNN's fixed cost per call outweighs its faster kernels.
constexpr int64_t kMinMultiplyAdds = int64_t{1} << 22;
// oneDNN builds a kernel for each new shape, which costs as much as a small multiply, and
// unpadded BERT batches have a new number of rows at every step. So oneDNN multiplies the rows in
// a multiple of kRowBlock (a few shapes, found in its cache after the first steps) and MKL the
// remaining < kRowBlock rows.
constexpr int64_t kRowBlock = 128;

int64_t blocked(int64_t rows) { return rows / kRowBlock * kRowBlock; }

// out = beta * out + a @ b, the rows of a and out split as above.
void multiply_rows(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& out, float beta) {
  const int64_t rows = a.size(0), head = blocked(rows);
  if (head > 0) at::native::mkldnn_matmul(a.narrow(0, 0, head), b, out.narrow(0, 0, head), beta, 1.0f);
  if (head < rows) out.narrow(0, head, rows - head).addmm_(a.narrow(0, head, rows - head), b, beta, 1.0);
}

// out = a^T @ b, summed over rows (a [rows, m], b [rows, n]) split as above.
void multiply_over_rows(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& out) {
  const int64_t rows = a.size(0), head = blocked(rows);
  if (head > 0) at::native::mkldnn_matmul(a.narrow(0, 0, head).t(), b.narrow(0, 0, head), out, 0.0f, 1.0f);
  if (head < rows) out.addmm_(a.narrow(0, head, rows - head).t(), b.narrow(0, head, rows - head), head > 0 ? 1.0 : 0.0, 1.0);
}

class OnednnLinear : public torch::autograd::Function<OnednnLinear> {
 public:
  // (The bias is optional<Tensor>: autograd takes an absent one as no input, not an undefined Tensor.)
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const std::optional<torch::Tensor>& bias_or_none) {
    const torch::Tensor bias = bias_or_none.value_or(torch::Tensor());
    ctx->save_for_backward({x, weight});
    ctx->saved_data["bias"] = bias.defined();
    const torch::Tensor rows = x.reshape({-1, x.size(-1)}).contiguous();
    const int64_t out_features = weight.size(0);
    // With a bias the product is added onto it (beta 1): no second pass over the output.
    torch::Tensor out = bias.defined() ? bias.expand({rows.size(0), out_features}).contiguous()
                                       : torch::empty({rows.size(0), out_features}, x.options());
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = out_features;
    multiply_rows(rows, weight.t(), out, bias.defined() ? 1.0f : 0.0f);
    return out.view(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor g = grads[0].reshape({-1, weight.size(0)}).contiguous();
    if (torch::GradMode::is_enabled()) {  // create_graph: the gradients must be differentiable themselves
      const torch::Tensor rows = x.reshape({-1, x.size(-1)});
      return {ctx->needs_input_grad(0) ? g.mm(weight).view(x.sizes()) : torch::Tensor(),
              ctx->needs_input_grad(1) ? g.t().mm(rows) : torch::Tensor(),
              ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2) ? g.sum(0) : torch::Tensor()};
    }
    torch::Tensor grad_x, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) {
      grad_x = torch::empty({g.size(0), weight.size(1)}, g.options());
      multiply_rows(g, weight.contiguous(), grad_x, 0.0f);
      grad_x = grad_x.view(x.sizes());
    }
    if (ctx->needs_input_grad(1)) {
      const torch::Tensor rows = x.reshape({-1, x.size(-1)}).contiguous();
      grad_weight = torch::empty(weight.sizes(), g.options());
      multiply_over_rows(g, rows, grad_weight);
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) grad_bias = g.sum(0);
    return {grad_x, grad_weight, grad_bias};
  }
};

}  // namespace

namespace {

}  // namespace

// The wheel's (2.11) mkldnn_matmul refuses float32 too, with "bf16 path needs the cpu support
// avx_ne_convert or avx512bw ...", on CPUs without those (AVX2-only x86, such as some AMD
// EPYCs): tried once, on a tiny product.
bool onednn_matmul_works_here() {
  static const bool works = [] {
    try {
      const torch::Tensor a = torch::ones({2, 2});
      const torch::Tensor out = torch::empty({2, 2});
      at::native::mkldnn_matmul(a, a, out, 0.0f, 1.0f);
      return out.eq(2).all().item<bool>();
    } catch (const c10::Error&) {
      return false;
    }
  }();
  return works;
}

namespace {

// oneDNN is chosen, works on this CPU, and every operand is a float32 CPU tensor, outside CPU
// autocast (which must see the ATen call to cast it).
bool onednn_applies(std::initializer_list<const torch::Tensor*> operands) {
  if (cpu_gemm() != CpuGemm::onednn || at::autocast::is_autocast_enabled(at::kCPU) || !onednn_matmul_works_here()) return false;
  return std::all_of(operands.begin(), operands.end(),
                     [](const torch::Tensor* t) { return t->device().is_cpu() && t->scalar_type() == torch::kFloat; });
}

}  // namespace

bool onednn_linear_usable(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!onednn_applies({&x, &weight}) || x.dim() < 1 || weight.dim() != 2) return false;
  return x.numel() * weight.size(0) >= kMinMultiplyAdds;
}

void batched_multiply(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& out, double alpha) {
  if (onednn_applies({&a, &b, &out})) {
    at::native::mkldnn_matmul(a, b, out, 0.0f, static_cast<float>(alpha));
  } else {
    at::baddbmm_out(const_cast<torch::Tensor&>(out), out, a, b, 0.0, alpha);  // beta 0: out's contents are ignored
  }
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const bool bias_ok = !bias.defined() || (bias.scalar_type() == torch::kFloat && bias.device().is_cpu());
  if (!bias_ok || !onednn_linear_usable(x, weight)) return torch::linear(x, weight, bias);
  return OnednnLinear::apply(x, weight, bias.defined() ? std::optional<torch::Tensor>(bias) : std::nullopt);
}

}  // namespace detail
}  // namespace frugal
