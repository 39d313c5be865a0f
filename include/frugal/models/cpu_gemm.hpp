#pragma once
// Which library multiplies the float32 matrices of Frugal models' linear layers on the CPU.
// LibTorch sends torch::linear to MKL; it also bundles oneDNN, which multiplied the shapes of a
// BERT training step's linear layers 1.2-1.6x faster than MKL on an AMD EPYC (MKL runs its AVX2
// kernels there, oneDNN AVX-512 code): the whole step took 0.93-0.96 of MKL's time. Both compute
// in float32, in a different order of summation. Process-wide, like LibTorch's own backend flags;
// the default is oneDNN where LibTorch was built with it.
//
//   frugal::set_cpu_gemm(frugal::CpuGemm::mkl);  // torch::linear's own path, as Hugging Face runs
//   frugal::set_cpu_gemm(frugal::parse_cpu_gemm(name));  // "onednn" or "mkl", from a config

#include <string>

namespace frugal {

enum class CpuGemm { onednn, mkl };

void set_cpu_gemm(CpuGemm gemm);
CpuGemm cpu_gemm();

/// "onednn" or "mkl"; anything else throws OptionError naming `option`.
CpuGemm parse_cpu_gemm(const std::string& name, const std::string& option = "cpu_gemm");
std::string to_string(CpuGemm gemm);

}  // namespace frugal
