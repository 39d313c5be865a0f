#include "core/detail/oom_safety_net.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "frugal/base/communicator.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal::detail {

void OomSafetyNet::out_of_memory(const c10::OutOfMemoryError& e, int64_t batch_size, int64_t step) {
  skipping_ = true;
  const std::string what = e.what_without_backtrace();
  log::warn(c10::str("out of memory in a micro-step of ", batch_size, " examples (step ", step, "): ", what.substr(0, what.find('\n'))));
}

void OomSafetyNet::stand_in(StepContext& ctx, const std::vector<std::shared_ptr<Policy>>& policies, const torch::Device& device,
                            bool transformed) const {
  if (!ctx.loss().defined()) ctx.set_loss(torch::zeros({}, torch::TensorOptions(device)));
  if (!ctx.boundary() || transformed) return;
  const torch::Tensor zero = torch::zeros({}, torch::TensorOptions(device));
  for (const auto& p : policies) {
    try {
      p->transform_loss(ctx, zero);
    } catch (const c10::OutOfMemoryError&) {  // every policy must see the boundary, even after one fails again
    }
  }
}

bool OomSafetyNet::window_failed(Communicator& communicator) {
  if (!start_) return false;  // not armed on any rank (the same policies everywhere)
  const bool failed = communicator.world_size() > 1 ? communicator.any(skipping_) : skipping_;
  if (!failed) start_.reset();
  return failed;
}

WindowStart OomSafetyNet::rewind() {
  if (!start_) throw TrainingError("out-of-memory safety net: the window's start was not recorded");
  WindowStart start = std::move(*start_);
  start_.reset();
  skipping_ = false;
  return start;
}

}  // namespace frugal::detail
