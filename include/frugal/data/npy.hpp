#pragma once
// Tensors as NPY (NumPy's .npy format, version 1.0/2.0), the field format for tensors in shards:
// Python's webdataset decodes ".npy" members with numpy.load, and numpy.save's output loads here.
//
//   sample.fields["npy"] = frugal::encode_npy(features);
//   torch::Tensor x = frugal::decode_npy(sample.field("npy"), sample.key + ".npy");

#include <torch/types.h>

#include <string>
#include <string_view>

namespace frugal {

/// Little-endian, C order. Supports bool, uint8, int8/16/32/64, float16/32/64.
std::string encode_npy(const torch::Tensor& tensor);
/// Throws DataError naming `where` and the byte offset of what is malformed (header, dtype,
/// Fortran order, a size that does not match the shape).
torch::Tensor decode_npy(std::string_view bytes, const std::string& where);

}  // namespace frugal
