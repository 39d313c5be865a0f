#pragma once
// The grid of a sweep: config keys, each with the values to try, and its cells (every
// combination, the first key varying slowest). From --grid key=v1,v2 flags or a TOML file:
//   [grid]
//   "precision.mode" = ["fp32", "bf16"]
//   "data.batch_size" = [16, 32]

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace frugal::sweep {

struct Axis {
  std::string key;
  std::vector<std::string> values;  // as written on a command line
};

/// One combination: (key, value) per axis, in axis order.
struct Cell {
  std::vector<std::pair<std::string, std::string>> settings;
  /// "precision.mode=bf16 data.batch_size=16"
  std::string label() const;
  /// A directory name made of the settings: "precision.mode-bf16__data.batch_size-16"; past
  /// 120 characters, its start and a hash of the whole.
  std::string directory_name() const;
};

class Grid {
 public:
  /// "key=v1,v2,..." ; std::invalid_argument naming the flag when malformed or repeated.
  void add_flag(const std::string& flag);
  /// The [grid] table of a TOML file; std::invalid_argument naming the file and key.
  void add_file(const std::filesystem::path& path);
  const std::vector<Axis>& axes() const { return axes_; }
  /// Every combination; std::invalid_argument when there are more than 10,000.
  std::vector<Cell> cells() const;

 private:
  void add_axis(Axis axis, const std::string& source);
  std::vector<Axis> axes_;
};

}  // namespace frugal::sweep
