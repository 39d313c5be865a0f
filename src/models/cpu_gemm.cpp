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

CpuGemm parse_cpu_gemm(const std::string& name, const std::string& option) {
  if (name == "onednn") return CpuGemm::onednn;
  if (name == "mkl") return CpuGemm::mkl;
  throw OptionError(option, c10::str(option, " must be \"onednn\" or \"mkl\", got \"", name, "\""));
}

std::string to_string(CpuGemm gemm) { return gemm == CpuGemm::onednn ? "onednn" : "mkl"; }

}  // namespace frugal
