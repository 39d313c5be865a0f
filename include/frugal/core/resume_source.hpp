#pragma once
// Where a fit continues from: handed to the Trainer (Trainer::set_resume_source; the checkpoint
// policy is one, see add_checkpointing), not discovered among the policies.

#include <memory>
#include <optional>
#include <string>

#include "frugal/base/snapshot.hpp"
#include "frugal/base/trainer_state.hpp"

namespace frugal {

class TrainingRun;

class ResumeSource {
 public:
  virtual ~ResumeSource() = default;
  /// Before anything else in fit(): the snapshot to continue from (the newest checkpoint), or
  /// nullptr to start afresh.
  virtual std::shared_ptr<const TrainingSnapshot> resume_from(const TrainingRun& run) = 0;
  /// The snapshot resume_from gave could not be restored (on some rank; `reason` says why): the
  /// Trainer then asks resume_from again, for an older one.
  virtual void resume_failed(const std::string& reason) = 0;
  /// The Trainer went back to an earlier snapshot of this run (StepContext::roll_back) and now
  /// stands at `state`: what was saved on the abandoned path must not win a resume.
  virtual void on_rolled_back(const TrainerState& state) = 0;
  /// The newest complete checkpoint written or resumed from, for errors that say where a
  /// restart would begin.
  virtual std::optional<std::string> last_checkpoint() const = 0;
};

}  // namespace frugal
