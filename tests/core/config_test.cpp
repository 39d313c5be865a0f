// Configuration: precedence of the four layers, errors naming key, value and source, the
// resolved file, and the command-line front end.
#include <catch2/catch.hpp>

#include <algorithm>

#include <fstream>
#include <iostream>

#include "frugal/config/standard_options.hpp"
#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

std::filesystem::path write_file(const std::string& name, const std::string& text) {
  // A directory per file: ctest runs test cases in parallel processes.
  auto path = scratch_dir("config_" + name) / name;
  std::ofstream(path) << text;
  return path;
}

struct Loaded {
  StandardOptions options;
  Config config;
  CommandLine cli;
  Loaded(std::vector<std::string> args, std::vector<std::string> env) {
    bind(config, options);
    args.insert(args.begin(), "prog");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    cli = load_config(static_cast<int>(argv.size()), argv.data(), config, "test", env);
  }
};

std::string error_of(std::vector<std::string> args, std::vector<std::string> env) {
  try {
    Loaded loaded(std::move(args), std::move(env));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("built-in < environment < file < command line", "[core][config]") {
  auto file = write_file("p.toml", "[trainer]\nmax_epochs = 4\nmax_steps = 40\n[data]\nbatch_size = 16\n");
  Loaded l({"--config", file.string(), "--trainer.max_steps=400", "--data.shuffle", "false"},
           {"FRUGAL_TRAINER_MAX_EPOCHS=2", "FRUGAL_TRAINER_LOG_EVERY_N_STEPS=7", "FRUGAL_DATA_BATCH_SIZE=8"});
  const TrainerOptions& t = l.options.trainer;
  CHECK(t.validate_every_epoch() == true);   // built-in
  CHECK(t.log_every_n_steps() == 7);         // env
  CHECK(t.max_epochs() == 4);                // file beats env
  CHECK(l.options.data.batch_size() == 16);  // file beats env
  CHECK(t.max_steps() == 400);               // command line beats file
  CHECK(l.options.data.shuffle() == false);
  CHECK(l.config.source_of("trainer.validate_every_epoch") == "default");
  CHECK(l.config.source_of("trainer.log_every_n_steps") == "environment variable FRUGAL_TRAINER_LOG_EVERY_N_STEPS");
  CHECK_THAT(l.config.source_of("trainer.max_epochs"), Catch::Contains("p.toml:2:14"));
  CHECK(l.config.source_of("trainer.max_steps") == "command line --trainer.max_steps");
  CHECK(l.cli.config_file == file);
}

TEST_CASE("an empty value (key=) on the command line does not take the next argument", "[core][config]") {
  Loaded l({"--trainer.run_dir=", "--trainer.max_epochs=3", "--trainer.device", "cpu"}, {});
  CHECK(l.options.trainer.run_dir().empty());
  CHECK(l.options.trainer.max_epochs() == 3);
  CHECK(l.options.trainer.device() == "cpu");
  CHECK_THAT(error_of({"--trainer.max_epochs="}, {}), Catch::Contains("trainer.max_epochs"));
}

TEST_CASE("command-line mistakes are named in the user's terms: a missing value, a repeated flag, a stray value, a typo",
          "[core][config]") {
  CHECK_THAT(error_of({"--trainer.max_epochs", "--data.seed=1"}, {}),
             Catch::Contains("--trainer.max_epochs needs a value") && Catch::Contains("followed by --data.seed=1"));
  CHECK_THAT(error_of({"--data.seed"}, {}), Catch::Contains("--data.seed needs a value") && Catch::Contains("ends the line"));
  CHECK_THAT(error_of({"--data.seed=1", "--data.seed", "2"}, {}),
             Catch::Contains("--data.seed is given 2 times ('1', '2'): give it once"));
  CHECK_THAT(error_of({"--smoke-test", "true"}, {}),
             Catch::Contains("unexpected argument 'true'") && Catch::Contains("--smoke-test takes no value"));
  CHECK_THAT(error_of({"--max_epochs=3"}, {}), Catch::Contains("unknown option --max_epochs (did you mean --trainer.max_epochs?)"));
  CHECK_THAT(error_of({"--trainer.max_epoch", "3"}, {}), Catch::Contains("did you mean --trainer.max_epochs?"));
  // Negative numbers are values, not options.
  Loaded negative({"--trainer.max_steps", "-1"}, {});
  CHECK(negative.options.trainer.max_steps() == -1);
}

TEST_CASE("unknown keys are errors naming the key and the source", "[core][config]") {
  auto file = write_file("unknown.toml", "[trainer]\nmax_epoch = 3\n");
  CHECK_THAT(error_of({"--config", file.string()}, {}),
             Catch::Contains("unknown config key 'trainer.max_epoch'") && Catch::Contains("unknown.toml:2:1") &&
                 Catch::Contains("trainer.max_epochs"));
  auto section = write_file("section.toml", "[trainr]\nmax_epochs = 3\n");
  CHECK_THAT(error_of({"--config", section.string()}, {}), Catch::Contains("'trainr.max_epochs'") && Catch::Contains("no such section"));
  CHECK_THAT(error_of({"--trainer.max_epoch=3"}, {}), Catch::Contains("command line") && Catch::Contains("--trainer.max_epoch"));
  CHECK_THAT(error_of({}, {"FRUGAL_TRAINER_MAX_EPOCH=3"}),
             Catch::Contains("FRUGAL_TRAINER_MAX_EPOCH=3") && Catch::Contains("unknown config key"));
  // FRUGAL_* variables outside our sections belong to tooling (the install script's venv).
  CHECK(error_of({}, {"FRUGAL_VENV=/opt/venv", "PATH=/bin"}) == "(no error)");
}

TEST_CASE("malformed values are errors naming the key, the value and the source", "[core][config]") {
  CHECK_THAT(error_of({}, {"FRUGAL_DATA_BATCH_SIZE=ten"}),
             Catch::Contains("'data.batch_size'") && Catch::Contains("FRUGAL_DATA_BATCH_SIZE") &&
                 Catch::Contains("expects an integer, got 'ten'"));
  auto typed = write_file("typed.toml", "[data]\nbatch_size = \"32\"\n");
  CHECK_THAT(error_of({"--config", typed.string()}, {}),
             Catch::Contains("'data.batch_size'") && Catch::Contains("typed.toml:2:14") && Catch::Contains("\"32\""));
  CHECK_THAT(error_of({"--smoke_test.mode=sometimes"}, {}),
             Catch::Contains("'smoke_test.mode'") && Catch::Contains("off, auto, fail, warn") && Catch::Contains("'sometimes'"));
  CHECK_THAT(error_of({"--data.shuffle=maybe"}, {}), Catch::Contains("expects true or false, got 'maybe'"));
  // Values that parse but break an option struct's rules: named with their source.
  auto zero = write_file("zero.toml", "[trainer]\nmax_epochs = 0\n");
  CHECK_THAT(error_of({"--config", zero.string()}, {}),
             Catch::Contains("'trainer.max_epochs' = 0") && Catch::Contains("zero.toml:2:14") &&
                 Catch::Contains("max_epochs must be >= 1, got 0"));
  CHECK_THAT(error_of({"--data.batch_size=-3"}, {}),
             Catch::Contains("command line --data.batch_size") && Catch::Contains("batch_size must be >= 1, got -3"));
}

TEST_CASE("TOML syntax errors and missing files name the file and position", "[core][config]") {
  auto broken = write_file("broken.toml", "[trainer]\nmax_epochs = = 3\n");
  CHECK_THAT(error_of({"--config", broken.string()}, {}), Catch::Contains("broken.toml:2:"));
  CHECK_THAT(error_of({"--config", "/nonexistent/x.toml"}, {}), Catch::Contains("/nonexistent/x.toml"));
  auto flat = write_file("flat.toml", "max_epochs = 3\n");
  CHECK_THAT(error_of({"--config", flat.string()}, {}), Catch::Contains("must be a [section] table"));
  // A quantity (finite default) must be finite; options that use nan as "off" still take it.
  CHECK_THAT(error_of({"--clipping.max_norm=nan"}, {}), Catch::Contains("clipping.max_norm") && Catch::Contains("expects a finite number, got 'nan'"));
  CHECK_THAT(error_of({"--cost.price_per_device_hour=inf"}, {}), Catch::Contains("expects a finite number"));
  CHECK(error_of({"--early_stopping.stopping_threshold=nan"}, {}) == "(no error)");
  // Inputs that crashed Debian's toml++ 3.3.0 (an assertion; __builtin_unreachable with NDEBUG):
  // the vendored toml++ gives a parse error, and so a ConfigError naming the file.
  auto tilde = write_file("tilde.toml", "[~");
  CHECK_THAT(error_of({"--config", tilde.string()}, {}), Catch::Contains("tilde.toml:1:"));
  auto accent = write_file("accent.toml", "[trainer]\nmax_epochs =\xC3\xA9 3\n");
  CHECK_THAT(error_of({"--config", accent.string()}, {}), Catch::Contains("accent.toml:2:"));
}

TEST_CASE("the resolved config lists every key with its source and loads back to the same values", "[core][config]") {
  Loaded l({"--trainer.max_epochs=9", "--trainer.run_dir=runs/a \"quoted\""}, {"FRUGAL_SMOKE_TEST_MODE=warn"});
  auto path = scratch_dir("resolved") / "config.toml";
  l.config.write_resolved(path);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("max_epochs = 9  # command line --trainer.max_epochs"));
  CHECK_THAT(text, Catch::Contains("mode = \"warn\"  # environment variable FRUGAL_SMOKE_TEST_MODE"));
  Loaded again({"--config", path.string()}, {});
  CHECK(again.options.trainer.max_epochs() == 9);
  CHECK(again.options.trainer.run_dir() == "runs/a \"quoted\"");
  CHECK(again.options.smoke_test.mode() == SmokeTestMode::warn);
}

TEST_CASE("--help lists every key with its default, and --smoke-test is recognised", "[core][config]") {
  Loaded help({"--help"}, {});
  REQUIRE(help.cli.exit_code == std::optional<int>(0));
  CHECK_THAT(help.cli.message, Catch::Contains("--trainer.max_epochs") && Catch::Contains("FRUGAL_TRAINER_MAX_EPOCHS") &&
                                   Catch::Contains("--smoke_test.mode"));
  Loaded smoke({"--smoke-test"}, {});
  CHECK(smoke.cli.smoke_test_only);
  CHECK_FALSE(smoke.cli.exit_code.has_value());
}

TEST_CASE("cluster-wide short environment names set the policy switches, and the long names win", "[core][config]") {
  Loaded l({}, {"FRUGAL_PRECISION=bf16", "FRUGAL_ACCUMULATE_STEPS=4", "FRUGAL_CLIP_NORM=0.5"});
  CHECK(l.options.precision.mode() == Precision::bf16);
  CHECK(l.options.accumulation.steps() == 4);
  CHECK(l.options.clipping.max_norm() == 0.5);
  CHECK(l.config.source_of("precision.mode") == "environment variable FRUGAL_PRECISION");
  Loaded both({}, {"FRUGAL_PRECISION_MODE=fp16", "FRUGAL_PRECISION=bf16"});
  CHECK(both.options.precision.mode() == Precision::fp16);
  auto file = write_file("amp.toml", "[precision]\nmode = \"fp16\"\n[accumulation]\nsteps = 2\n");
  Loaded over({"--config", file.string(), "--accumulation.steps=8"}, {"FRUGAL_PRECISION=bf16"});
  CHECK(over.options.precision.mode() == Precision::fp16);
  CHECK(over.options.accumulation.steps() == 8);
  CHECK_THAT(error_of({}, {"FRUGAL_ACCUMULATE_STEPS=0"}),
             Catch::Contains("FRUGAL_ACCUMULATE_STEPS") && Catch::Contains("steps must be >= 1, got 0"));
  CHECK_THAT(error_of({"--precision.mode=fp8"}, {}), Catch::Contains("fp32, fp16, bf16") && Catch::Contains("'fp8'"));
}

TEST_CASE("add_policies switches on exactly the policies the options ask for", "[core][config]") {
  Loaded l({"--precision.mode=fp16", "--accumulation.steps=2", "--clipping.mode=norm", "--smoke_test.mode=off"}, {});
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), l.options.trainer.device("cpu").run_dir(""));
  add_policies(trainer, l.options);
  std::vector<std::string> names;
  for (const auto& p : trainer.policies()) names.push_back(p->name());
  CHECK(names == std::vector<std::string>{"gradient_accumulation", "mixed_precision", "gradient_clipping", "throughput", "memory_report", "progress"});
  Loaded none({"--smoke_test.mode=off", "--throughput.enabled=false", "--progress.enabled=false"}, {});
  Trainer plain(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), none.options.trainer.device("cpu").run_dir(""));
  add_policies(plain, none.options);
  CHECK(plain.policies().empty());
  // The training thread's pool: only when set, or on a GPU run with loader workers (automatic).
  Loaded threads({"--smoke_test.mode=off", "--throughput.enabled=false", "--progress.enabled=false", "--trainer.cpu_threads=1"}, {});
  Trainer sized(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), threads.options.trainer.device("cpu").run_dir(""));
  add_policies(sized, threads.options);
  REQUIRE(sized.policies().size() == 1);
  CHECK(sized.policies().front()->name() == "cpu_threads");
  CHECK_THAT(error_of({"--trainer.cpu_threads=-1"}, {}), Catch::Contains("trainer.cpu_threads") && Catch::Contains("must be >= 0"));
}

TEST_CASE("the tooling keys switch on cost, profiler and the budget's checkpoint", "[core][config]") {
  Loaded l({"--smoke_test.mode=off", "--cost.price_per_device_hour=2.5", "--cost.hard_budget=100", "--profiler.every_n_steps=500",
            "--progress.enabled=false"},
           {});
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), l.options.trainer.device("cpu").run_dir(""));
  add_policies(trainer, l.options);
  std::vector<std::string> names;
  for (const auto& p : trainer.policies()) names.push_back(p->name());
  // A hard budget without checkpointing still gets a checkpoint where the run stops.
  CHECK(names == std::vector<std::string>{"throughput", "memory_report", "cost", "profiler", "checkpoint"});
  CHECK_THAT(error_of({"--cost.budget=10"}, {}), Catch::Contains("price_per_device_hour"));
  CHECK_THAT(error_of({"--profiler.steps=0"}, {}), Catch::Contains("profiler.steps") || Catch::Contains("steps must be >= 1"));
  CHECK_THAT(error_of({"--auto_batch.margin=1.5"}, {}), Catch::Contains("margin must be in [0, 1)"));
}

TEST_CASE("the [distributed] keys reach the communicator and data-parallel options", "[core][config]") {
  Loaded l({"--distributed.backend=gloo", "--distributed.bucket_cap_mb=4", "--distributed.buffers=average"},
           {"FRUGAL_DISTRIBUTED_TIMEOUT_SECONDS=30"});
  CHECK(l.options.communicator.backend() == CollectiveBackend::gloo);
  CHECK(l.options.communicator.timeout_seconds() == 30.0);
  CHECK(l.options.data_parallel.bucket_cap_mb() == 4.0);
  CHECK(l.options.data_parallel.buffers() == BufferSync::average);
  CHECK_THAT(error_of({"--distributed.backend=mpi"}, {}), Catch::Contains("distributed.backend") && Catch::Contains("mpi"));
  CHECK_THAT(error_of({"--distributed.bucket_cap_mb=-1"}, {}),
             Catch::Contains("distributed.bucket_cap_mb") && Catch::Contains("got -1"));
  CHECK_THAT(error_of({"--distributed.timeout_seconds=0"}, {}), Catch::Contains("timeout_seconds must be > 0"));
}

TEST_CASE("the data pipeline's [data] keys reach the loader and shard options", "[core][config]") {
  Loaded l({"--data.num_workers=3", "--data.shuffle_buffer=64", "--data.on_corrupt=skip"},
           {"FRUGAL_DATA_PREFETCH_BATCHES=6", "FRUGAL_DATA_AUGMENTED_VARIANTS=4"});
  CHECK(l.options.data.num_workers() == 3);
  CHECK(l.options.data.prefetch_batches() == 6);
  CHECK(l.options.shards.shuffle_buffer() == 64);
  CHECK(l.options.shards.on_corrupt() == OnCorrupt::skip);
  CHECK(l.options.shards.variants() == 4);
  CHECK_THAT(error_of({"--data.num_workers=-1"}, {}), Catch::Contains("data.num_workers") && Catch::Contains("got -1"));
  CHECK_THAT(error_of({"--data.on_corrupt=ignore"}, {}), Catch::Contains("data.on_corrupt") && Catch::Contains("ignore"));
  CHECK_THAT(error_of({"--data.shuffle_buffer=0"}, {}), Catch::Contains("data.shuffle_buffer") && Catch::Contains("got 0"));
  CHECK_THAT(error_of({}, {"FRUGAL_DATA_AUGMENTED_VARIANTS=-2"}),
             Catch::Contains("data.augmented_variants") && Catch::Contains("FRUGAL_DATA_AUGMENTED_VARIANTS"));
}

TEST_CASE("a device that is not here is refused before the run directory is written", "[core][config]") {
  if (torch::cuda::is_available()) {
    std::cout << "SKIPPED: this machine has CUDA (the test asks for it where there is none)\n";
    return;
  }
  const auto dir = scratch_dir("config_device") / "run";
  StandardOptions options;
  Config config;
  bind(config, options);
  const std::string run_dir = "--trainer.run_dir=" + dir.string();
  std::vector<const char*> argv{"prog", "--trainer.device=cuda", run_dir.c_str()};
  CHECK_THROWS_WITH(start_program(static_cast<int>(argv.size()), const_cast<char**>(argv.data()), config, options, "test"),
                    Catch::Contains("CUDA is not available"));
  CHECK_FALSE(std::filesystem::exists(dir / "config.toml"));
}

TEST_CASE("the order of policies is their phases' whatever the order they are added in", "[core][config]") {
  Loaded l({"--precision.mode=bf16", "--accumulation.steps=2", "--clipping.mode=norm", "--smoke_test.mode=fail", "--trainer.cpu_threads=1",
            "--early_stopping.enabled=true", "--recovery.enabled=true", "--checkpoint.enabled=true", "--cost.price_per_device_hour=1",
            "--profiler.every_n_steps=100"},
           {});
  const auto names_of = [](const Trainer& t) {
    std::vector<std::string> names;
    for (const auto& p : t.policies()) names.push_back(p->name());
    return names;
  };
  const std::vector<std::string> contract{"smoke_test",   "cpu_threads", "gradient_accumulation", "mixed_precision", "gradient_clipping",
                                          "throughput",   "memory_report", "cost",                "profiler",        "progress",
                                          "early_stopping", "checkpoint",  "recovery"};
  Trainer standard(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), l.options.trainer.device("cpu").run_dir(""));
  add_policies(standard, l.options);
  CHECK(names_of(standard) == contract);

  // The same policies added in reverse, and a policy that names no phase first: the phases keep
  // their order (within the observation phase, the order added: reversed), the phase-less one last.
  struct Counter : Policy {
    std::string name() const override { return "counter"; }
  };
  Trainer reversed(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), l.options.trainer.device("cpu").run_dir(""));
  reversed.add_policy(std::make_shared<Counter>());
  for (auto it = standard.policies().rbegin(); it != standard.policies().rend(); ++it) reversed.add_policy(*it);
  auto expected = contract;
  std::reverse(expected.begin() + 5, expected.begin() + 10);  // throughput .. progress, one phase
  expected.push_back("counter");
  CHECK(names_of(reversed) == expected);
  for (size_t i = 1; i < reversed.policies().size(); ++i) CHECK(reversed.policies()[i - 1]->phase() <= reversed.policies()[i]->phase());
}

TEST_CASE("a section bound in two places (the standard optimizer keys and a program's own) is one table that loads back",
          "[core][config]") {
  StandardOptions options;
  Config config;
  bind(config, options);
  double lr = 0.1;
  config.bind("optimizer.lr", lr, "a program's own key, bound after every standard section");
  std::vector<const char*> argv{"prog", "--optimizer.lr=0.5", "--optimizer.state_bits=8"};
  REQUIRE_FALSE(load_config(static_cast<int>(argv.size()), argv.data(), config, "test", {}).exit_code);
  const auto path = scratch_dir("two_places") / "config.toml";
  config.write_resolved(path);
  const std::string text = bytes_of(path);
  CHECK(text.find("[optimizer]") == text.rfind("[optimizer]"));

  StandardOptions back;
  Config again;
  bind(again, back);
  double lr_back = 0;
  again.bind("optimizer.lr", lr_back, "the same key");
  const std::string file = path.string();
  std::vector<const char*> argv_back{"prog", "--config", file.c_str()};
  REQUIRE_FALSE(load_config(static_cast<int>(argv_back.size()), argv_back.data(), again, "test", {}).exit_code);
  CHECK(lr_back == 0.5);
  CHECK(back.optimizer_states.bits() == 8);
}
