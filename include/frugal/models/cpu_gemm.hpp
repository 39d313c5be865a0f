#pragma once
// Which library multiplies the float32 matrices of Frugal models' linear layers on the CPU.
// LibTorch sends torch::linear to MKL; it also bundles oneDNN, which multiplied the shapes of a
// BERT training step's linear layers 1.2-1.6x faster than MKL on an AMD EPYC (MKL runs its AVX2
// kernels there, oneDNN AVX-512 code): the whole step took 0.93-0.96 of MKL's time. Both compute
// in float32, in a different order of summation. Process-wide, like LibTorch's own backend flags;
// the default is oneDNN where LibTorch was built with it.
//
//   frugal::set_cpu_gemm(frugal::CpuGemm::mkl);  // torch::linear's own path, as Hugging Face runs
//   frugal::set_cpu_gemm(frugal::parse_enum_option<frugal::CpuGemm>(name, "model.cpu_gemm"));  // "onednn" or "mkl"

#include <array>
#include <string>

#include "frugal/base/enum_names.hpp"

namespace frugal {

enum class CpuGemm { onednn, mkl };
constexpr std::array<EnumName<CpuGemm>, 2> names_of(CpuGemm) { return {{{CpuGemm::onednn, "onednn"}, {CpuGemm::mkl, "mkl"}}}; }

void set_cpu_gemm(CpuGemm gemm);
CpuGemm cpu_gemm();


}  // namespace frugal
