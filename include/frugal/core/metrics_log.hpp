#pragma once
// Appends one JSON object a line to <run_dir>/metrics.jsonl: training records (step, epoch,
// loss, lr, samples/s), validation records and events (budget alerts, profiles). A line is
// flushed whole, so a run killed mid-write leaves at most one partial last line, which readers
// skip. Optionally also writes every field as a TensorBoard scalar "<event>/<field>" at the
// record's "step".
//
//   frugal::MetricsLog log("runs/x/metrics.jsonl");
//   log.write("train", {{"step", 10}, {"loss", 0.25}});

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace frugal {

class TensorBoardWriter;

class MetricsLog {
 public:
  /// An empty path makes a log that records nothing.
  /// A non-empty `tensorboard_dir` also writes TensorBoard event files there.
  explicit MetricsLog(const std::filesystem::path& path = {}, const std::filesystem::path& tensorboard_dir = {});
  ~MetricsLog();
  MetricsLog(MetricsLog&&) noexcept;
  MetricsLog& operator=(MetricsLog&&) noexcept;
  bool enabled() const { return out_.is_open(); }
  /// Writes {"event": event, "time": <unix seconds>, fields...}.
  void write(const std::string& event, const std::vector<std::pair<std::string, double>>& fields);

 private:
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace frugal
