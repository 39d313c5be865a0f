#include "frugal/io/safetensors.hpp"

#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include "base/durable_io.hpp"
#include "frugal/errors.hpp"

namespace frugal {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// The reference implementation refuses headers over 100 MB; so do we, before allocating.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

const std::vector<std::pair<std::string, torch::Dtype>>& dtype_names() {
  static const std::vector<std::pair<std::string, torch::Dtype>> names{
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
      {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
      {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};
  return names;
}

std::string dtype_name(torch::Dtype dtype) {
  for (const auto& [name, d] : dtype_names()) {
    if (d == dtype) return name;
  }
  throw OptionError("dtype", c10::str("safetensors cannot store dtype ", dtype));
}

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// Reads exactly `n` bytes at `offset`, looping over short reads.
void pread_all(int fd, char* out, int64_t n, int64_t offset, const std::string& file) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30)), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw DataError(file, offset, system_error("read failed"));
    if (got == 0) throw DataError(file, offset, "unexpected end of file (the file shrank while being read)");
    out += got;
    n -= got;
    offset += got;
  }
}

void write_all(int fd, const char* data, int64_t n, const std::string& file) {
  while (n > 0) {
    const ssize_t put = ::write(fd, data, static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30)));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw Error(system_error("writing " + file + " failed"));
    data += put;
    n -= put;
  }
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& value, const std::string& file) {
  const std::string where = "header: tensor '" + name + "'";
  if (!value.is_object()) throw DataError(file, 8, where + ": expected an object");
  if (!value.contains("dtype") || !value["dtype"].is_string()) throw DataError(file, 8, where + ": missing string 'dtype'");
  if (!value.contains("shape") || !value["shape"].is_array()) throw DataError(file, 8, where + ": missing array 'shape'");
  if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2) {
    throw DataError(file, 8, where + ": missing 'data_offsets' [begin, end]");
  }
  SafetensorsEntry entry;
  const std::string dtype = value["dtype"].get<std::string>();
  const auto& names = dtype_names();
  const auto it = std::find_if(names.begin(), names.end(), [&](const auto& p) { return p.first == dtype; });
  if (it == names.end()) throw DataError(file, 8, where + ": unsupported dtype '" + dtype + "'");
  entry.dtype = it->second;
  // numel * itemsize must not overflow: bound each dimension and the running product.
  int64_t bytes = static_cast<int64_t>(c10::elementSize(entry.dtype));
  for (const auto& dim : value["shape"]) {
    if (!dim.is_number_unsigned()) throw DataError(file, 8, where + ": shape entries must be non-negative integers");
    const uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (d > 0 && bytes > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(d))) {
      throw DataError(file, 8, where + ": shape is too large");
    }
    entry.shape.push_back(static_cast<int64_t>(d));
    bytes *= static_cast<int64_t>(d);
  }
  for (const auto& offset : value["data_offsets"]) {
    if (!offset.is_number_unsigned() || offset.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw DataError(file, 8, where + ": data_offsets must be non-negative integers");
    }
  }
  entry.begin = static_cast<int64_t>(value["data_offsets"][0].get<uint64_t>());
  entry.end = static_cast<int64_t>(value["data_offsets"][1].get<uint64_t>());
  if (entry.end < entry.begin) throw DataError(file, 8, where + ": data_offsets end before they begin");
  if (entry.end - entry.begin != bytes) {
    throw DataError(file, 8, c10::str(where, ": data_offsets span ", entry.end - entry.begin, " bytes but dtype ", dtype,
                                      " and shape ", c10::IntArrayRef(entry.shape), " need ", bytes));
  }
  return entry;
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::filesystem::path path) : path_(std::move(path)) {
  const std::string file = path_.string();
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw DataError(file, -1, system_error("cannot open"));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw DataError(file, -1, system_error("cannot stat"));
    const int64_t size = st.st_size;
    if (size < 8) throw DataError(file, 0, c10::str("too short for a safetensors file (", size, " bytes)"));
    uint64_t header_bytes = 0;
    pread_all(fd_, reinterpret_cast<char*>(&header_bytes), 8, 0, file);
    if (header_bytes > static_cast<uint64_t>(kMaxHeaderBytes) || static_cast<int64_t>(header_bytes) > size - 8) {
      throw DataError(file, 0, c10::str("header length ", header_bytes, " exceeds the file's ", size - 8,
                                        " remaining bytes (or the 100 MB limit): not a safetensors file, or truncated"));
    }
    std::string header(header_bytes, '\0');
    pread_all(fd_, header.data(), static_cast<int64_t>(header_bytes), 8, file);
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(header);
    } catch (const nlohmann::json::parse_error& e) {
      throw DataError(file, 8 + static_cast<int64_t>(e.byte) - 1, c10::str("header is not valid JSON: ", e.what()));
    } catch (const nlohmann::json::exception& e) {  // a number too large for any type (out_of_range.406)
      throw DataError(file, 8, c10::str("header is not valid JSON: ", e.what()));
    }
    if (!json.is_object()) throw DataError(file, 8, "header is not a JSON object");
    data_start_ = 8 + static_cast<int64_t>(header_bytes);
    for (const auto& [name, value] : json.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) throw DataError(file, 8, "header: __metadata__ must be an object of strings");
        for (const auto& [key, v] : value.items()) {
          if (!v.is_string()) throw DataError(file, 8, "header: __metadata__." + key + " must be a string");
          metadata_[key] = v.get<std::string>();
        }
        continue;
      }
      entries_.emplace(name, parse_entry(name, value, file));
    }
    // As the reference implementation: the tensors tile the data section, no gap, no overlap.
    std::vector<std::pair<std::string, const SafetensorsEntry*>> by_offset;
    for (const auto& [name, entry] : entries_) by_offset.emplace_back(name, &entry);
    std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
      return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
    });
    int64_t expected = 0;
    for (const auto& [name, entry] : by_offset) {
      if (entry->begin != expected) {
        throw DataError(file, data_start_ + entry->begin,
                        c10::str("tensor '", name, "' begins at data offset ", entry->begin, " but the previous tensor ends at ",
                                 expected, " (tensors must tile the data without gaps or overlaps)"));
      }
      expected = entry->end;
    }
    if (data_start_ + expected != size) {
      throw DataError(file, data_start_ + expected,
                      c10::str("the header describes ", expected, " data bytes but the file holds ", size - data_start_,
                               size - data_start_ < expected ? " (truncated)" : " (trailing bytes)"));
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw DataError(path_.string(), -1, "has no tensor named '" + name + "'");
  return it->second;
}

torch::Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  torch::Tensor out = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  pread_all(fd_, static_cast<char*>(out.data_ptr()), e.end - e.begin, data_start_ + e.begin, path_.string());
  return out;
}

std::map<std::string, torch::Tensor> read_safetensors(const std::filesystem::path& path) {
  SafetensorsReader reader(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& name : reader.names()) out.emplace(name, reader.read(name));
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || header.contains(name)) {
      throw OptionError("tensors", c10::str("write_safetensors(", path.string(), "): tensor name '", name, "' is repeated or reserved"));
    }
    if (!tensor.defined()) throw OptionError("tensors", c10::str("write_safetensors: tensor '", name, "' is undefined"));
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    header[name] = {{"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const std::filesystem::path temporary = path.string() + ".partial";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(system_error("cannot create " + temporary.string()));
  try {
    const uint64_t length = header_text.size();
    write_all(fd, reinterpret_cast<const char*>(&length), 8, temporary.string());
    write_all(fd, header_text.data(), static_cast<int64_t>(header_text.size()), temporary.string());
    for (const auto& t : data) {
      write_all(fd, static_cast<const char*>(t.data_ptr()), t.numel() * static_cast<int64_t>(t.element_size()), temporary.string());
    }
    if (::fsync(fd) != 0) throw Error(system_error("fsync of " + temporary.string() + " failed"));
  } catch (...) {
    ::close(fd);
    std::filesystem::remove(temporary);
    throw;
  }
  ::close(fd);
  std::filesystem::rename(temporary, path);
  detail::fsync_directory(path.has_parent_path() ? path.parent_path() : std::filesystem::path("."));
}

LoadReport load_safetensors(torch::nn::Module& module, const std::filesystem::path& path, bool strict, const std::string& prefix) {
  SafetensorsReader reader(path);
  std::map<std::string, std::string> file_names;  // module name → file name
  for (const auto& name : reader.names()) {
    if (name.rfind(prefix, 0) == 0) file_names.emplace(name.substr(prefix.size()), name);
  }
  LoadReport report;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, torch::Tensor& target) {
    const auto it = file_names.find(name);
    if (it == file_names.end()) {
      report.missing.push_back(name);
      return;
    }
    const SafetensorsEntry& e = reader.entry(it->second);
    if (c10::IntArrayRef(e.shape) != target.sizes()) {
      throw DataError(path.string(), -1, c10::str("tensor '", it->second, "' has shape ", c10::IntArrayRef(e.shape),
                                                  " but the module's '", name, "' has shape ", target.sizes()));
    }
    target.copy_(reader.read(it->second));  // copy_ converts dtype and keeps device and memory format
    used.insert(it->first);
    report.loaded.push_back(name);
  };
  for (auto& item : module.named_parameters(/*recurse=*/true)) load(item.key(), item.value());
  for (auto& item : module.named_buffers(/*recurse=*/true)) load(item.key(), item.value());
  for (const auto& name : reader.names()) {
    if (name.rfind(prefix, 0) != 0 || !used.count(name.substr(prefix.size()))) report.unexpected.push_back(name);
  }
  if (strict && (!report.missing.empty() || !report.unexpected.empty())) {
    std::string what;
    if (!report.missing.empty()) what += c10::str(report.missing.size(), " tensors missing (first: '", report.missing.front(), "')");
    if (!report.unexpected.empty()) {
      what += c10::str(what.empty() ? "" : ", ", report.unexpected.size(), " unexpected (first: '", report.unexpected.front(), "')");
    }
    throw DataError(path.string(), -1, "does not match the module: " + what);
  }
  return report;
}

void save_safetensors(const torch::nn::Module& module, const std::filesystem::path& path,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true)) tensors.emplace_back(item.key(), item.value());
  write_safetensors(path, tensors, metadata);
}

}  // namespace frugal
