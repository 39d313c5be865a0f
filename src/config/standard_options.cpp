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

  MixedPrecisionOptions& p = o.precision;
  config.bind_enum("precision.mode", p.mode(),
                   {{"fp32", Precision::fp32}, {"fp16", Precision::fp16}, {"bf16", Precision::bf16}},
                   "fp16 = autocast + dynamic loss scaling; bf16 = autocast");
  config.bind("precision.autocast", p.autocast(), "Run the forward pass under autocast");
  GradScalerOptions& g = p.scaler();
  config.bind("precision.init_scale", g.init_scale(), "Initial fp16 loss scale");
  config.bind("precision.growth_factor", g.growth_factor(), "Scale growth after growth_interval clean steps");
  config.bind("precision.backoff_factor", g.backoff_factor(), "Scale backoff after an overflow");
  config.bind("precision.growth_interval", g.growth_interval(), "Clean steps before the scale grows");
  config.bind("precision.min_scale", p.min_scale(), "Floor of the fp16 loss scale");
  config.bind_enum("precision.on_min_scale", p.on_min_scale(),
                   {{"error", ScaleFloorAction::error}, {"fallback", ScaleFloorAction::fallback}},
                   "At the floor: stop, or fall back to bf16 (else fp32)");
  config.add_check("precision", [&p] { p.validate(); });
  config.add_environment_alias("FRUGAL_PRECISION", "precision.mode");

  GradientAccumulationOptions& a = o.accumulation;
  config.bind("accumulation.steps", a.steps(), "Micro-batches per optimizer step");
  config.bind("accumulation.effective_batch_size", a.effective_batch_size(),
              "If > 0, derive steps = this / (batch_size x replicas)");
  config.add_check("accumulation", [&a] { a.validate(); });
  config.add_environment_alias("FRUGAL_ACCUMULATE_STEPS", "accumulation.steps");
  config.add_environment_alias("FRUGAL_EFFECTIVE_BATCH_SIZE", "accumulation.effective_batch_size");

  GradientClippingOptions& c = o.clipping;
  config.bind_enum("clipping.mode", c.mode(), {{"off", ClipMode::off}, {"norm", ClipMode::norm}, {"value", ClipMode::value}},
                   "Clip gradients by global norm or by value");
  config.bind("clipping.max_norm", c.max_norm(), "Largest total gradient norm");
  config.bind("clipping.norm_type", c.norm_type(), "p of the p-norm (inf: max norm)");
  config.bind("clipping.max_value", c.max_value(), "Largest absolute gradient value");
  config.add_check("clipping", [&c] { c.validate(); });
  config.add_environment_alias("FRUGAL_CLIP_NORM", "clipping.max_norm");

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
  if (options.accumulation.steps() > 1 || options.accumulation.effective_batch_size() > 0) {
    trainer.add_policy(std::make_shared<GradientAccumulationPolicy>(options.accumulation));
  }
  if (options.precision.mode() != Precision::fp32) {
    trainer.add_policy(std::make_shared<MixedPrecisionPolicy>(options.precision));
  }
  if (options.clipping.mode() != ClipMode::off) {
    trainer.add_policy(std::make_shared<GradientClippingPolicy>(options.clipping));
  }
}

}  // namespace frugal
