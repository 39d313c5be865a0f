#include "frugal/core/trainer_options.hpp"

#include <c10/util/StringUtil.h>

#include "frugal/errors.hpp"

namespace frugal {

void TrainerOptions::validate() const {
  if (max_epochs() < 1) throw OptionError("max_epochs", c10::str("max_epochs must be >= 1, got ", max_epochs()));
  if (max_steps() < -1 || max_steps() == 0) {
    throw OptionError("max_steps", c10::str("max_steps must be >= 1 or -1 (no limit), got ", max_steps()));
  }
  if (pause_at_step() < -1 || pause_at_step() == 0) {
    throw OptionError("pause_at_step", c10::str("pause_at_step must be >= 1 or -1 (off), got ", pause_at_step()));
  }
  if (pause_at_epoch() < -1 || pause_at_epoch() == 0) {
    throw OptionError("pause_at_epoch", c10::str("pause_at_epoch must be >= 1 or -1 (off), got ", pause_at_epoch()));
  }
  if (validate_every_n_steps() < 0) {
    throw OptionError("validate_every_n_steps",
                      c10::str("validate_every_n_steps must be >= 0, got ", validate_every_n_steps()));
  }
  if (validation_batch_size() < 0) {
    throw OptionError("validation_batch_size",
                      c10::str("validation_batch_size must be >= 0, got ", validation_batch_size()));
  }
  if (log_every_n_steps() < 1) {
    throw OptionError("log_every_n_steps", c10::str("log_every_n_steps must be >= 1, got ", log_every_n_steps()));
  }
}

}  // namespace frugal
