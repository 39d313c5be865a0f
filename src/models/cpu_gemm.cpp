#include "frugal/models/cpu_gemm.hpp"

#include <ATen/Context.h>
#include <c10/util/StringUtil.h>

#include <atomic>

#include "frugal/errors.hpp"

namespace frugal {
namespace {

std::atomic<CpuGemm> chosen{at::hasMKLDNN() ? CpuGemm::onednn : CpuGemm::mkl};

}  // namespace

void set_cpu_gemm(CpuGemm gemm) {
  if (gemm == CpuGemm::onednn && !at::hasMKLDNN()) throw OptionError("cpu_gemm", "cpu_gemm onednn: this LibTorch was built without oneDNN");
  chosen = gemm;
}

CpuGemm cpu_gemm() { return chosen; }

}  // namespace frugal
