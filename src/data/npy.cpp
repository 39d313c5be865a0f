#include "frugal/data/npy.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <cstring>

#include "frugal/errors.hpp"

namespace frugal {
namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);

struct DtypeName {
  const char* descr;
  torch::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"|b1", torch::kBool},  {"|u1", torch::kUInt8},  {"|i1", torch::kInt8},    {"<i2", torch::kInt16},
    {"<i4", torch::kInt32}, {"<i8", torch::kInt64},  {"<f2", torch::kFloat16}, {"<f4", torch::kFloat32},
    {"<f8", torch::kFloat64}};

// The value after 'key': in NumPy's header dict, e.g. "'<f4'", "False", "(3, 4)".
std::string_view header_value(std::string_view header, std::string_view key, const std::string& where) {
  const std::string quoted = c10::str("'", key, "'");
  const size_t at = header.find(quoted);
  if (at == std::string_view::npos) throw DataError(where, 10, "NPY header has no " + quoted);
  size_t begin = header.find(':', at);
  if (begin == std::string_view::npos) throw DataError(where, static_cast<int64_t>(10 + at), "NPY header: no ':' after " + quoted);
  ++begin;
  while (begin < header.size() && header[begin] == ' ') ++begin;
  size_t end = begin;
  if (end < header.size() && header[end] == '(') {
    end = header.find(')', begin);
    if (end == std::string_view::npos) throw DataError(where, static_cast<int64_t>(10 + begin), "NPY header: unclosed shape");
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  return header.substr(begin, end - begin);
}

}  // namespace

std::string encode_npy(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
  const DtypeName* dtype = nullptr;
  for (const auto& d : kDtypes) {
    if (d.type == t.scalar_type()) dtype = &d;
  }
  if (dtype == nullptr) throw Error(c10::str("encode_npy: unsupported dtype ", t.scalar_type()));
  std::string shape = "(";
  for (int64_t i = 0; i < t.dim(); ++i) shape += c10::str(t.size(i), t.dim() == 1 ? "," : (i + 1 < t.dim() ? ", " : ""));
  shape += ")";
  std::string header = c10::str("{'descr': '", dtype->descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Magic, version 1.0, a 2-byte header length; the header is padded so the data starts 64-byte aligned.
  const size_t unpadded = kMagic.size() + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  out.append(static_cast<const char*>(t.data_ptr()), bytes);
  return out;
}

torch::Tensor decode_npy(std::string_view bytes, const std::string& where) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != kMagic) throw DataError(where, 0, "not an NPY file (bad magic)");
  const auto major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw DataError(where, 8, "NPY header length is truncated");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    throw DataError(where, 6, c10::str("unsupported NPY version ", static_cast<int>(major)));
  }
  if (header_start + header_len > bytes.size()) {
    throw DataError(where, static_cast<int64_t>(header_start), c10::str("NPY header of ", header_len, " bytes runs past the end"));
  }
  const std::string_view header = bytes.substr(header_start, header_len);
  const std::string_view descr = header_value(header, "descr", where);
  const DtypeName* dtype = nullptr;
  for (const auto& d : kDtypes) {
    if (descr == c10::str("'", d.descr, "'") ||
        (d.descr[0] == '|' && descr == c10::str("'<", d.descr + 1, "'"))) {
      dtype = &d;
    }
  }
  if (dtype == nullptr) throw DataError(where, static_cast<int64_t>(header_start), "unsupported NPY dtype " + std::string(descr));
  if (header_value(header, "fortran_order", where) != "False") {
    throw DataError(where, static_cast<int64_t>(header_start), "Fortran-order NPY arrays are not supported");
  }
  const std::string_view shape_text = header_value(header, "shape", where);
  std::vector<int64_t> shape;
  int64_t numel = 1;
  // The product of the non-zero sizes is bounded too: a 0 makes the array empty, but the others
  // still set its strides, which must not overflow (found by the npy fuzz target).
  int64_t extent = 1;
  for (size_t i = 1; i + 1 < shape_text.size();) {
    while (i + 1 < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i + 1 >= shape_text.size()) break;
    int64_t dim = 0;
    size_t digits = 0;
    while (i + 1 < shape_text.size() && shape_text[i] >= '0' && shape_text[i] <= '9' && digits < 18) {
      dim = dim * 10 + (shape_text[i++] - '0');
      ++digits;
    }
    if (digits == 0 || extent > (int64_t{1} << 40) / std::max<int64_t>(dim, 1)) {
      throw DataError(where, static_cast<int64_t>(header_start), "bad NPY shape " + std::string(shape_text));
    }
    shape.push_back(dim);
    numel *= dim;
    extent *= std::max<int64_t>(dim, 1);
  }
  const size_t data_start = header_start + header_len;
  const size_t data_bytes = static_cast<size_t>(numel) * c10::elementSize(dtype->type);
  if (bytes.size() - data_start != data_bytes) {
    throw DataError(where, static_cast<int64_t>(data_start),
                    c10::str("NPY data holds ", bytes.size() - data_start, " bytes but shape ", shape_text, " needs ", data_bytes));
  }
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(dtype->type));
  if (data_bytes > 0) std::memcpy(out.data_ptr(), bytes.data() + data_start, data_bytes);
  return out;
}

}  // namespace frugal
