#pragma once
// The local checkpoint directory as a destination: a checkpoint is committed once its folder is
// renamed into place (CheckpointStore does that), so there is nothing to wait for; after each
// save the retention rule runs, and what it drops is deleted or moved to a cold directory.

#include <string>

#include "frugal/checkpoint/checkpoint_destination.hpp"
#include "frugal/base/retention.hpp"

namespace frugal {

struct LocalRetention {
  RetentionRule rule;
  /// Checkpoints the rule drops, or older than archive_after_days, move here ("" = deleted); the
  /// best ones stay in place.
  std::string archive_dir;
  double archive_after_days = 0;  // 0 = only by the rule
};

class LocalDestination : public CheckpointDestination {
 public:
  explicit LocalDestination(LocalRetention retention) : retention_(std::move(retention)) {}
  std::string name() const override { return "local"; }
  std::string where() const override;
  std::string location_of(const std::string& name) const override;
  void open(const TrainingRun& run, const CheckpointStore& local) override;
  void apply_retention() const override;
  /// Retention on `store` directly (CheckpointPolicy::apply_retention before a fit).
  void apply_retention(const CheckpointStore& store) const;

 private:
  LocalRetention retention_;
  const CheckpointStore* store_ = nullptr;
};

}  // namespace frugal
