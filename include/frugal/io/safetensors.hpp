#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// mapping each tensor name to {dtype, shape, data_offsets}, then the raw tensor bytes. It is how
// torchvision and transformers weights are exchanged, so Frugal's models load theirs directly
// and theirs load Frugal's. Every offset and size is checked against the file before a byte is
// read; a malformed file is a DataError naming it, the tensor and the byte offset.
//
//   frugal::SafetensorsReader file("resnet50.safetensors");
//   torch::Tensor w = file.read("conv1.weight");
//   frugal::write_safetensors("out.safetensors", {{"w", w}}, {{"format", "pt"}});
//   frugal::LoadReport report = frugal::load_safetensors(*net, "resnet50.safetensors");

#include <torch/nn/module.h>
#include <torch/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace frugal {

/// Where one tensor lies in a safetensors file.
struct SafetensorsEntry {
  torch::Dtype dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offset from the start of the data section
  int64_t end = 0;
};

/// An open safetensors file: its header is read and checked at construction; tensors are read
/// one at a time with positioned reads straight into their memory (no copy of the whole file).
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::filesystem::path path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  /// Tensor names in sorted order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  /// The "__metadata__" string map (may be empty).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// A new CPU tensor; DataError naming the tensor if it is not in the file.
  torch::Tensor read(const std::string& name) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Every tensor of the file, by name.
std::map<std::string, torch::Tensor> read_safetensors(const std::filesystem::path& path);

/// Writes `tensors` (any device and layout; stored contiguous, row-major) atomically: a
/// temporary file is written and fsynced, then renamed over `path`. Names must be unique.
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// What load_safetensors matched: names the module has that the file lacks, and the reverse.
struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // in the module, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the module
};

/// Copies the file's tensors into `module`'s parameters and buffers of the same names (state_dict
/// names: "layer1.0.conv1.weight"), converting dtype and keeping each parameter's device and
/// memory format. A shape mismatch is always a DataError naming the tensor; with `strict`, so is a
/// missing or unexpected name. `prefix` is stripped from file names first ("bert." ...).
LoadReport load_safetensors(torch::nn::Module& module, const std::filesystem::path& path, bool strict = true,
                            const std::string& prefix = "");

/// The module's parameters and buffers under their state_dict names, as torchvision and
/// transformers' save_pretrained would write them.
void save_safetensors(const torch::nn::Module& module, const std::filesystem::path& path,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace frugal
