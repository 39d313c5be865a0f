#pragma once
// Frugal's exception types. Library code throws these with enough context to act on (the
// option, key, file or module at fault); it never exits or aborts.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace frugal {

/// The text of an exception for a user: LibTorch's errors without their C++ backtrace.
std::string message_of(const std::exception& e);

/// Base of every error Frugal throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An option struct holds a bad value. `option()` is the field name, e.g. "max_epochs".
class OptionError : public Error {
 public:
  OptionError(std::string option, const std::string& message)
      : Error(message), option_(std::move(option)) {}
  const std::string& option() const noexcept { return option_; }

 private:
  std::string option_;
};

/// A config file, environment variable or command-line value is unknown or malformed; the
/// message names the key, the value and where it came from.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// User training code broke a contract of the Trainer (e.g. a loss that is not a scalar).
class TrainingError : public Error {
 public:
  using Error::Error;
};

/// Training produced a NaN or infinite loss, or weights, that no policy accounts for (the fp16
/// loss scaler's skipped steps do): the run stops rather than train on, and no checkpoint is
/// written from such weights. TrainerOptions::stop_on_nonfinite_loss turns this off.
class NonFiniteError : public TrainingError {
 public:
  using TrainingError::TrainingError;
};

/// SIGTERM or SIGUSR1 arrived before training started (while loading data or building the model):
/// nothing was trained, so nothing needs saving. run_program prints the message and exits 0, as
/// a pre-emption during training does after its checkpoint.
class Preempted : public Error {
 public:
  using Error::Error;
};

/// A checkpoint or snapshot cannot be written or read back: the file and the reason are named.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// A data file (shard, index, image, JSON, NPY...) is malformed, truncated or unsafe. `file()` names
/// it and `offset()` is the byte offset where the problem was found (-1 when it has none).
class DataError : public Error {
 public:
  DataError(std::string file, int64_t offset, const std::string& message)
      : Error(offset >= 0 ? file + ": at byte offset " + std::to_string(offset) + ": " + message : file + ": " + message),
        file_(std::move(file)),
        offset_(offset) {}
  const std::string& file() const noexcept { return file_; }
  int64_t offset() const noexcept { return offset_; }

 private:
  std::string file_;
  int64_t offset_;
};

}  // namespace frugal
