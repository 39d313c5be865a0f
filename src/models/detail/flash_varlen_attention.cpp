#include "flash_varlen_attention.hpp"

#include <ATen/ops/_flash_attention_forward.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <tuple>

#include "frugal/log.hpp"

namespace frugal::detail {
namespace {

std::atomic<bool> refused{false};  // a kernel that refused once (no flash build, an old GPU) is not asked again

}  // namespace

bool flash_varlen_usable(const torch::Tensor& qkv, int64_t heads) {
  const int64_t d = qkv.size(-1) / 3 / heads;
  const auto dtype = qkv.scalar_type();
  return qkv.is_cuda() && (dtype == torch::kHalf || dtype == torch::kBFloat16) && d % 8 == 0 && d <= 256 && !refused.load();
}

torch::Tensor flash_varlen_attention(const torch::Tensor& qkv, const torch::Tensor& cu_seqlens, int64_t max_len, int64_t heads,
                                     double dropout_p) {
  const int64_t rows = qkv.size(0), hidden = qkv.size(1) / 3;
  const torch::Tensor parts = qkv.view({rows, 3, heads, hidden / heads});  // [T, heads, d] views, rows strided
  try {
    const torch::Tensor context = std::get<0>(at::_flash_attention_forward(parts.select(1, 0), parts.select(1, 1), parts.select(1, 2),
                                                                           cu_seqlens, cu_seqlens, max_len, max_len, dropout_p,
                                                                           /*is_causal=*/false, /*return_debug_mask=*/false));
    return context.reshape({rows, hidden});
  } catch (const c10::Error& e) {
    if (!refused.exchange(true)) {
      log::warn(std::string("BERT unpadded attention: the varlen flash kernel refused (") + e.what_without_backtrace() +
                "); padding the rows around scaled_dot_product_attention instead");
    }
    return {};
  }
}

}  // namespace frugal::detail
