#pragma once
// Writes TensorBoard event files (scalars) without TensorFlow or protobuf: each record is an
// `Event` protobuf, encoded by hand (five fields), framed as a TFRecord (length, masked
// CRC-32C of the length, data, masked CRC-32C of the data). TensorBoard reads the directory.
//
//   frugal::TensorBoardWriter tb("runs/x/tensorboard");
//   tb.add_scalar("train/loss", 0.25, /*step=*/10);

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace frugal {

class TensorBoardWriter {
 public:
  /// Creates `dir` and a new events.out.tfevents.<time>.<host>.<pid> file in it.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time = -1.0);
  /// Makes what was written visible to readers.
  void flush();
  const std::filesystem::path& file() const { return file_; }

 private:
  void write_record(const std::string& event);
  std::filesystem::path file_;
  std::ofstream out_;
};

namespace detail {
/// CRC-32C (Castagnoli), the checksum TFRecord framing uses.
uint32_t crc32c(const void* data, size_t size);
}  // namespace detail

}  // namespace frugal
