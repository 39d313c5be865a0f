#include "frugal/config/standard_options.hpp"

#include "frugal/core/trainer.hpp"

namespace frugal {

void bind(Config& config, StandardOptions& o) {
  TrainerOptions& t = o.trainer;
  config.bind("trainer.max_epochs", t.max_epochs(), "Epochs to train");
  config.bind("trainer.max_steps", t.max_steps(), "Stop after this many optimizer steps; -1 = no limit");
  config.bind("trainer.validate_every_n_steps", t.validate_every_n_steps(), "Validate every N steps; 0 = off");
  config.bind("trainer.validate_every_epoch", t.validate_every_epoch(), "Validate at the end of each epoch");
  config.bind("trainer.validation_batch_size", t.validation_batch_size(), "Validation batch size; 0 = data.batch_size");
  config.bind("trainer.log_every_n_steps", t.log_every_n_steps(), "Write a metrics line every N steps");
  config.bind("trainer.device", t.device(), "auto, cpu, cuda or cuda:N");
  config.bind("trainer.run_dir", t.run_dir(), "Directory for config.toml, metrics.jsonl, train.log; \"\" = none");
  config.add_check("trainer", [&t] { t.validate(); });

  DataLoaderOptions& d = o.data;
  config.bind("data.batch_size", d.batch_size(), "Examples per (micro-)batch");
  config.bind("data.shuffle", d.shuffle(), "Shuffle each epoch (by seed and epoch)");
  config.bind("data.drop_last", d.drop_last(), "Drop the last, smaller batch of an epoch");
  config.bind("data.seed", d.seed(), "Seed of the data order");
  config.add_check("data", [&d] { d.validate(); });

  SmokeTestOptions& s = o.smoke_test;
  config.bind_enum("smoke_test.mode", s.mode(),
                   {{"off", SmokeTestMode::off}, {"auto", SmokeTestMode::automatic},
                    {"fail", SmokeTestMode::fail}, {"warn", SmokeTestMode::warn}},
                   "CPU smoke test before the run; auto = fail-mode when training on a GPU");
  config.bind("smoke_test.batches", s.batches(), "Batches the smoke test runs");
  config.add_check("smoke_test", [&s] { s.validate(); });

  config.bind_enum("log.level", o.log_level,
                   {{"trace", log::Level::trace}, {"debug", log::Level::debug}, {"info", log::Level::info},
                    {"warn", log::Level::warn}, {"error", log::Level::error}, {"off", log::Level::off}},
                   "Console and train.log verbosity");
}

void add_policies(Trainer& trainer, const StandardOptions& options) {
  // The smoke test runs in on_fit_begin, before any other policy's state matters.
  if (options.smoke_test.mode() != SmokeTestMode::off) {
    trainer.add_policy(std::make_shared<SmokeTestPolicy>(options.smoke_test));
  }
}

}  // namespace frugal
