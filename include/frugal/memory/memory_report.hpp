#pragma once
// What one rank holds for training, by kind: the parameters, the gradients (every distinct
// storage: .grad, a sharded optimizer's gradient pieces, data-parallel buckets) and the optimizer
// state. Measured at the first optimizer step (gradients just before it, the optimizer state,
// created lazily, just after) and again at each log line; logged once and recorded in the
// metrics as memory_parameters_mb, memory_gradients_mb, memory_optimizer_mb. This is where
// sharding (distributed.shard) shows: the optimizer state and, with `gradients`, the gradients
// fall to about 1/N per rank.
//
//   trainer.add_policy(std::make_shared<frugal::MemoryReportPolicy>());   // add_policies adds it

#include <cstdint>
#include <vector>

#include "frugal/base/storage_bytes.hpp"  // storage_bytes, which the report counts with
#include "frugal/core/policy.hpp"

namespace frugal {

struct MemoryFootprint {
  int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_state_bytes = 0;
};

class MemoryReportPolicy : public Policy {
 public:
  std::string name() const override { return "memory_report"; }
  PolicyPhase phase() const override { return PolicyPhase::observation; }
  void on_fit_begin(const TrainingRun& run) override;
  void before_optimizer_step(StepContext& ctx) override;
  void on_after_optimizer_step(StepContext& ctx) override;
  void collect_metrics(Metrics& metrics) override;

  /// The latest measurement (zeros before the first optimizer step).
  const MemoryFootprint& footprint() const { return footprint_; }

 private:
  bool due(const TrainerState& state) const;
  const TrainingRun* run_ = nullptr;
  MemoryFootprint footprint_;
  bool logged_ = false;
  bool measuring_ = false;
};

}  // namespace frugal
