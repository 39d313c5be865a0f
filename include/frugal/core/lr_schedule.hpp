#pragma once
// Learning-rate schedules as functions of the optimizer step: the multiplier applied to each
// parameter group's base learning rate (as torch.optim.lr_scheduler.LambdaLR). Being pure
// functions of the step, they need no state of their own to resume exactly.
//
//   trainer.set_lr_schedule(frugal::lr::linear_warmup_decay(/*warmup=*/100, /*total=*/1000));

#include <cstdint>
#include <functional>

namespace frugal {

using LrSchedule = std::function<double(int64_t optimizer_step)>;

namespace lr {
/// Always 1.
LrSchedule constant();
/// Linear 0 -> 1 over `warmup_steps`, then linear 1 -> 0 at `total_steps` (BERT's schedule).
LrSchedule linear_warmup_decay(int64_t warmup_steps, int64_t total_steps);
/// Multiplies by `gamma` every `step_size` steps (torch StepLR).
LrSchedule step_decay(int64_t step_size, double gamma);
/// Half-cosine from 1 to `min_factor` over `total_steps` after `warmup_steps` of linear warmup.
LrSchedule cosine(int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);
}  // namespace lr

}  // namespace frugal
