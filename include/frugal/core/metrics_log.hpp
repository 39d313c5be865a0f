#pragma once
// Appends one JSON object a line to <run_dir>/metrics.jsonl: training records (step, epoch,
// loss, lr, samples/s) and validation records. A line is flushed whole, so a run killed
// mid-write leaves at most one partial last line, which readers skip.
//
//   frugal::MetricsLog log("runs/x/metrics.jsonl");
//   log.write("train", {{"step", 10}, {"loss", 0.25}});

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace frugal {

class MetricsLog {
 public:
  /// An empty path makes a log that records nothing.
  explicit MetricsLog(const std::filesystem::path& path = {});
  bool enabled() const { return out_.is_open(); }
  /// Writes {"event": event, "time": <unix seconds>, fields...}.
  void write(const std::string& event, const std::vector<std::pair<std::string, double>>& fields);

 private:
  std::ofstream out_;
};

}  // namespace frugal
