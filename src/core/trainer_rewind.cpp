// Going back: to where the resume source says the run stopped, to the start of a window some rank
// could not finish (run again with half the micro-batch), to a snapshot a policy asked for; and
// the micro-batch that changes with them.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "core/detail/loss_window.hpp"
#include "core/detail/oom_safety_net.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {

void Trainer::resume() {
  // The newest snapshot of the resume source that restores on every rank; on a failure, the next older.
  while (auto snapshot = resume_source_ ? resume_source_->resume_from(*this) : nullptr) {
    std::string failure;
    try {
      restore(*snapshot);
    } catch (const std::exception& e) {
      failure = message_of(e);
      log::warn(failure);
    }
    if (!communicator_->any(!failure.empty())) return;
    resume_source_->resume_failed(failure.empty() ? "another rank could not restore it (see its log)" : failure);
  }
}

bool Trainer::window_dropped() {
  // One decision for all ranks: any rank out of memory drops the window everywhere.
  if (!oom_net_->window_failed(*communicator_)) return false;
  const int64_t old_size = train_loader_.options().batch_size();
  if (old_size < 2) throw TrainingError("out of memory with a micro-batch of 1 example: nothing is left to halve");
  const detail::WindowStart start = oom_net_->rewind();
  optimizer_->zero_grad(/*set_to_none=*/true);
  model_.module().zero_grad(/*set_to_none=*/true);  // a sharded optimizer's pieces are not the parameters
  if (device_.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
  // The window never happened: counters back to its start, its data read again in halves.
  state_.micro_step = start.micro_step;
  state_.samples_seen = start.samples_seen;
  loss_window_->rewind(start.log_window);
  const int64_t new_size = old_size / 2;
  change_micro_batch(new_size);
  const int64_t first_example = start.position.batch_index * old_size;
  if (first_example % new_size != 0) {
    log::warn(c10::str("micro-batch ", old_size, " is odd: ", first_example % new_size, " examples of the epoch are read twice"));
  }
  train_loader_.restore({start.position.epoch, first_example / new_size, start.position.seed, new_size});
  log::warn(c10::str("out of memory: every rank runs step ", state_.step + 1, " again with micro-batches of ", new_size,
                     " (was ", old_size, ")"));
  record("out_of_memory", {{"step", static_cast<double>(state_.step)}, {"micro_batch", static_cast<double>(new_size)}});
  return true;
}

void Trainer::roll_back(const StepContext::Rollback& rollback) {
  optimizer_->zero_grad(/*set_to_none=*/true);
  const StepContext::Standing standing = standing_;  // decisions stand across a rollback
  restore(*rollback.to);
  standing_ = standing;
  apply_lr_schedule();
  DataPosition at = rollback.resume_at;
  if (at.batch_index >= train_loader_.batches_per_epoch()) at = {at.epoch + 1, 0, at.seed, at.batch_size};
  train_loader_.restore(at);
  state_.epoch = at.epoch;
  loss_window_->drop_step();
  log::info(c10::str("rolled back to step ", state_.step, "; reading on at epoch ", at.epoch, ", batch ", at.batch_index));
  if (resume_source_) resume_source_->on_rolled_back(state_);
}

void Trainer::change_micro_batch(int64_t new_size) {
  const int64_t old_size = train_loader_.options().batch_size();
  if (old_size == new_size) return;
  train_loader_.set_batch_size(new_size);
  const int64_t from = micro_batch_change_ ? micro_batch_change_->from : old_size;
  micro_batch_change_ = from == new_size ? std::nullopt : std::optional(StepContext::MicroBatchChange{from, new_size});
}

}  // namespace frugal
