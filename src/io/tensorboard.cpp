#include "frugal/io/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>

#include "frugal/errors.hpp"

namespace frugal {
namespace {

// --- The few protobuf wire-format pieces an Event with scalars needs -------------------------
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field << 3 | wire_type)); }
template <class T>
void put_fixed(std::string& out, T value) {  // little-endian, as on every machine Frugal runs on
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_key(event, 1, 1);
  put_fixed(event, wall_time);
  put_key(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));
  return event;
}

uint32_t masked_crc(const std::string& bytes) {
  const uint32_t crc = detail::crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace

namespace detail {
uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}
}  // namespace detail

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = unix_now();
  file_ = dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
                 std::to_string(getpid()));
  out_.open(file_, std::ios::binary | std::ios::app);
  if (!out_) throw Error("cannot open TensorBoard event file '" + file_.string() + "' for writing");
  std::string first = event_header(now, 0);
  put_bytes(first, 3, "brain.Event:2");  // readers check the version in the first record
  write_record(first);
  flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_key(summary_value, 2, 5);
  put_fixed(summary_value, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event = event_header(wall_time >= 0 ? wall_time : unix_now(), step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string length;
  put_fixed(length, static_cast<uint64_t>(event.size()));
  std::string record = length;
  put_fixed(record, masked_crc(length));
  record += event;
  put_fixed(record, masked_crc(event));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

void TensorBoardWriter::flush() {
  out_.flush();
  if (!out_) throw Error("writing TensorBoard event file '" + file_.string() + "' failed");
}

}  // namespace frugal
