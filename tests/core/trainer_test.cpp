// The Trainer's step sequence: parity with a hand-written loop, hook order, cancellation,
// boundaries, loss transforms, forward scopes, validation, stopping and metrics.
#include <catch2/catch.hpp>

#include <numeric>

#include <fstream>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

TrainerOptions quiet_options() { return TrainerOptions().device("cpu").run_dir("").log_every_n_steps(1000); }

// Records every hook call as "name:hook"; optionally cancels or clears boundaries.
struct Recorder : Policy {
  explicit Recorder(std::string n, std::vector<std::string>& log) : name_(std::move(n)), log_(log) {}
  std::string name() const override { return name_; }
  void on_fit_begin(const TrainingRun&) override { log_.push_back(name_ + ":fit_begin"); }
  void on_fit_end(const TrainingRun&) override { log_.push_back(name_ + ":fit_end"); }
  void on_epoch_end(const TrainerState&) override { log_.push_back(name_ + ":epoch_end"); }
  void on_step_begin(StepContext& ctx) override {
    if (ctx.first_in_epoch()) log_.push_back(name_ + ":first_in_epoch");
    log_.push_back(name_ + ":step_begin");
    if (non_boundary_every_other && ctx.state().micro_step % 2 == 0) ctx.set_boundary(false);
  }
  std::unique_ptr<ForwardGuard> forward_guard(const TrainerState&, Phase) override {
    log_.push_back(name_ + ":forward_guard");
    return nullptr;
  }
  torch::Tensor transform_loss(StepContext&, torch::Tensor loss) override {
    log_.push_back(name_ + ":transform_loss");
    return loss;
  }
  void reduce_gradients(StepContext&) override { log_.push_back(name_ + ":reduce"); }
  void unscale_gradients(StepContext& ctx) override {
    log_.push_back(name_ + ":unscale");
    if (cancel_at_step >= 0 && ctx.state().step == cancel_at_step) ctx.cancel_step("test overflow");
  }
  void clip_gradients(StepContext&) override { log_.push_back(name_ + ":clip"); }
  void before_optimizer_step(StepContext&) override { log_.push_back(name_ + ":before_step"); }
  void on_after_optimizer_step(StepContext& ctx) override {
    log_.push_back(name_ + (ctx.step_cancelled() ? ":after_step(cancelled)" : ":after_step"));
  }
  void on_step_end(StepContext&) override { log_.push_back(name_ + ":step_end"); }
  void on_validation_end(const TrainerState&, const Metrics&) override { log_.push_back(name_ + ":validation_end"); }

  std::string name_;
  std::vector<std::string>& log_;
  int64_t cancel_at_step = -1;
  bool non_boundary_every_other = false;
};

std::vector<std::string> only(const std::vector<std::string>& log, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& l : log) {
    if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
  }
  return out;
}

}  // namespace

TEST_CASE("Trainer with no policies computes exactly what a hand-written LibTorch loop computes", "[core][trainer]") {
  Seeded seeded;
  TinyNet reference(4, 16, 3);
  TinyNet trained = std::dynamic_pointer_cast<TinyNetImpl>(reference->clone());
  auto data = blobs(96);
  const int64_t batch = 16;

  // The hand-written loop: consecutive slices, SGD with momentum, two epochs.
  torch::optim::SGD hand_opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto all = data->get_batch([] { std::vector<int64_t> v(96); std::iota(v.begin(), v.end(), 0); return v; }());
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int64_t start = 0; start < 96; start += batch) {
      hand_opt.zero_grad();
      auto loss = torch::cross_entropy_loss(reference->forward(all.input.slice(0, start, start + batch)),
                                            all.target.slice(0, start, start + batch));
      loss.backward();
      hand_opt.step();
    }
  }

  Trainer trainer(Model(trained.ptr(), cross_entropy()),
                  [](torch::nn::Module& m) {
                    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
                  },
                  data, quiet_options().max_epochs(2), DataLoaderOptions().batch_size(batch).shuffle(false));
  auto result = trainer.fit();
  CHECK(result.state.step == 12);
  CHECK(result.state.epoch == 2);
  CHECK(torch::equal(flat_parameters(*reference), flat_parameters(*trained)));
}

TEST_CASE("one micro-step calls the hooks in the documented order, policies in the order added", "[core][trainer]") {
  Seeded seeded;
  std::vector<std::string> log;
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), quiet_options().max_steps(1),
                  DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<Recorder>("a", log));
  trainer.add_policy(std::make_shared<Recorder>("b", log));
  trainer.fit();
  const std::vector<std::string> expected{
      "a:fit_begin", "b:fit_begin", "a:first_in_epoch", "a:step_begin", "b:first_in_epoch", "b:step_begin",
      "a:forward_guard", "b:forward_guard", "a:transform_loss", "b:transform_loss",
      "a:reduce", "b:reduce", "a:unscale", "b:unscale", "a:clip", "b:clip",
      "a:before_step", "b:before_step", "a:after_step", "b:after_step", "a:step_end", "b:step_end",
      "a:epoch_end", "b:epoch_end", "a:fit_end", "b:fit_end"};
  CHECK(log == expected);
}

TEST_CASE("a cancelled step leaves the weights alone and skips the remaining gradient hooks", "[core][trainer]") {
  Seeded seeded;
  std::vector<std::string> log;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(16), quiet_options().max_steps(2),
                  DataLoaderOptions().batch_size(8).shuffle(false));
  trainer.set_lr_schedule([](int64_t step) { return 1.0 / static_cast<double>(step + 1); });
  auto recorder = std::make_shared<Recorder>("r", log);
  recorder->cancel_at_step = 0;  // the first boundary
  trainer.add_policy(recorder);

  // Weights after the first (cancelled) step must equal the initial ones: check in a policy.
  struct Snapshot : Policy {
    std::string name() const override { return "snapshot"; }
    void on_after_optimizer_step(StepContext& ctx) override { after.push_back(flat_parameters(ctx.module())); }
    std::vector<torch::Tensor> after;
  };
  auto snapshot = std::make_shared<Snapshot>();
  trainer.add_policy(snapshot);
  const auto initial = flat_parameters(*net);
  const double lr_before = trainer.state().lr;
  auto result = trainer.fit();

  REQUIRE(snapshot->after.size() == 2);
  CHECK(torch::equal(snapshot->after[0], initial));
  CHECK_FALSE(torch::equal(snapshot->after[1], initial));
  CHECK(result.state.step == 2);
  CHECK(result.state.skipped_steps == 1);
  CHECK(result.state.optimizer_steps() == 1);
  CHECK(result.state.lr == Approx(lr_before / 2));  // the schedule advanced once, not twice
  const auto r = only(log, "r:");
  const std::vector<std::string> first_step(r.begin() + 2, r.begin() + 10);
  CHECK(first_step == std::vector<std::string>{"step_begin", "forward_guard", "transform_loss",
                                               "reduce", "unscale", "after_step(cancelled)", "step_end", "step_begin"});
}

TEST_CASE("micro-steps that are not boundaries accumulate gradients without stepping", "[core][trainer]") {
  Seeded seeded;
  std::vector<std::string> log;
  TinyNet net;
  TinyNet reference = std::dynamic_pointer_cast<TinyNetImpl>(net->clone());
  auto data = blobs(32);
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(0.1), data, quiet_options(),
                  DataLoaderOptions().batch_size(8).shuffle(false));
  auto recorder = std::make_shared<Recorder>("r", log);
  recorder->non_boundary_every_other = true;
  trainer.add_policy(recorder);
  auto result = trainer.fit();
  CHECK(result.state.micro_step == 4);
  CHECK(result.state.step == 2);
  auto r = only(log, "r:");
  CHECK(std::count(r.begin(), r.end(), "reduce") == 2);
  CHECK(std::count(r.begin(), r.end(), "transform_loss") == 4);

  // Same as summing the gradients of two micro-batches by hand.
  torch::optim::SGD opt(reference->parameters(), torch::optim::SGDOptions(0.1));
  for (int64_t pair = 0; pair < 2; ++pair) {
    opt.zero_grad();
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t start = (pair * 2 + k) * 8;
      std::vector<int64_t> idx(8);
      std::iota(idx.begin(), idx.end(), start);
      auto b = data->get_batch(idx);
      torch::cross_entropy_loss(reference->forward(b.input), b.target).backward();
    }
    opt.step();
  }
  CHECK(torch::allclose(flat_parameters(*reference), flat_parameters(*net), 1e-6, 1e-7));
}

TEST_CASE("transform_loss changes what is backpropagated", "[core][trainer]") {
  Seeded seeded;
  struct ZeroLoss : Policy {
    std::string name() const override { return "zero_loss"; }
    torch::Tensor transform_loss(StepContext&, torch::Tensor loss) override { return loss * 0.0; }
  };
  TinyNet net;
  const auto initial = flat_parameters(*net);
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(16), quiet_options(), DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<ZeroLoss>());
  auto result = trainer.fit();
  CHECK(result.state.step == 2);
  CHECK(torch::equal(initial, flat_parameters(*net)));
  CHECK(result.train_loss > 0.1);  // the recorded loss is the user's loss, before transforms
}

TEST_CASE("forward guards are open exactly around the forward pass, in training and validation", "[core][trainer]") {
  Seeded seeded;
  static int open_guards = 0;
  static std::vector<Phase> phases;
  struct Guard : ForwardGuard {
    Guard() { ++open_guards; }
    ~Guard() override { --open_guards; }
  };
  struct Scoped : Policy {
    std::string name() const override { return "scoped"; }
    std::unique_ptr<ForwardGuard> forward_guard(const TrainerState&, Phase phase) override {
      phases.push_back(phase);
      return std::make_unique<Guard>();
    }
    torch::Tensor transform_loss(StepContext&, torch::Tensor loss) override {
      CHECK(open_guards == 0);  // the scopes close before the loss transforms and backward
      return loss;
    }
  };
  int forwards_inside = 0;
  LossFn<TinyNetImpl> loss = [&](TinyNetImpl& n, const Batch& b) {
    forwards_inside += open_guards;
    return torch::cross_entropy_loss(n.forward(b.input), b.target);
  };
  MetricsFn<TinyNetImpl> metrics = [&](TinyNetImpl& n, const Batch& b) {
    forwards_inside += open_guards;
    return BatchMetrics{{"loss", torch::cross_entropy_loss(n.forward(b.input), b.target)}};
  };
  Trainer trainer(Model(TinyNet().ptr(), loss, metrics), sgd(), blobs(16), quiet_options(), DataLoaderOptions().batch_size(8));
  trainer.set_validation_data(blobs(8, 3));
  trainer.add_policy(std::make_shared<Scoped>());
  trainer.fit();
  CHECK(forwards_inside == 3);  // two training batches, one validation batch
  CHECK(phases == std::vector<Phase>{Phase::train, Phase::train, Phase::validate});
  CHECK(open_guards == 0);
}

TEST_CASE("validation averages metrics over examples and runs every N steps and at epoch ends", "[core][trainer]") {
  Seeded seeded;
  std::vector<std::string> log;
  TinyNet net;
  auto val = blobs(20, 99);  // 20 examples in batches of 8: 8 + 8 + 4
  Trainer trainer(Model(net.ptr(), cross_entropy(), accuracy_and_loss()), sgd(), blobs(32),
                  quiet_options().max_epochs(2).validate_every_n_steps(3), DataLoaderOptions().batch_size(8));
  trainer.set_validation_data(val);
  trainer.add_policy(std::make_shared<Recorder>("r", log));
  trainer.fit();
  // 8 steps: validations after steps 3 and 6 and at both epoch ends (4, 8).
  auto r = only(log, "r:");
  CHECK(std::count(r.begin(), r.end(), "validation_end") == 4);

  torch::NoGradGuard no_grad;
  std::vector<int64_t> idx(20);
  std::iota(idx.begin(), idx.end(), 0);
  auto all = val->get_batch(idx);
  const double expected_loss = torch::cross_entropy_loss(net->forward(all.input), all.target).item<double>();
  CHECK(trainer.state().last_validation.at("loss") == Approx(expected_loss).epsilon(1e-6));
}

TEST_CASE("a policy's should_stop ends the fit and names itself, and max_steps ends it too", "[core][trainer]") {
  Seeded seeded;
  struct StopAtThree : Policy {
    std::string name() const override { return "stopper"; }
    std::optional<std::string> should_stop(const TrainerState& s) override {
      return s.step >= 3 ? std::optional<std::string>("enough") : std::nullopt;
    }
  };
  Trainer a(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64), quiet_options().max_epochs(5),
            DataLoaderOptions().batch_size(8));
  a.add_policy(std::make_shared<StopAtThree>());
  auto ra = a.fit();
  CHECK(ra.state.step == 3);
  CHECK(ra.state.stop_reason == std::optional<std::string>("stopper: enough"));

  Trainer b(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64), quiet_options().max_epochs(5).max_steps(11),
            DataLoaderOptions().batch_size(8));
  auto rb = b.fit();
  CHECK(rb.state.step == 11);
  CHECK(rb.state.epoch == 1);  // 8 steps in epoch 0, stopped 3 steps into epoch 1
}

TEST_CASE("the metrics file gets a training line per log interval and validation lines", "[core][trainer]") {
  Seeded seeded;
  const auto dir = scratch_dir("metrics");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy(), accuracy_and_loss()), sgd(), blobs(64),
                  quiet_options().run_dir(dir.string()).log_every_n_steps(2), DataLoaderOptions().batch_size(8));
  trainer.set_validation_data(blobs(16, 5));
  trainer.set_lr_schedule(lr::step_decay(4, 0.5));
  trainer.fit();
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  int train = 0, validation = 0;
  std::string last_train;
  while (std::getline(in, line)) {
    if (line.find("\"event\":\"train\"") != std::string::npos) {
      ++train;
      last_train = line;
    }
    if (line.find("\"event\":\"validation\"") != std::string::npos) ++validation;
  }
  CHECK(train == 4);
  CHECK(validation == 1);
  CHECK(last_train.find("\"step\":8.0") != std::string::npos);
  CHECK(last_train.find("\"lr\":0.025") != std::string::npos);  // 0.1 * 0.5^(8/4)
  CHECK(last_train.find("\"samples_per_s\"") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "train.log"));
}

TEST_CASE("contract violations are clear errors", "[core][trainer]") {
  Seeded seeded;
  LossFn<TinyNetImpl> vector_loss = [](TinyNetImpl& n, const Batch& b) { return n.forward(b.input).sum(1); };
  Trainer bad(Model(TinyNet().ptr(), vector_loss), sgd(), blobs(8), quiet_options(), DataLoaderOptions().batch_size(4));
  CHECK_THROWS_WITH(bad.fit(), Catch::Contains("must return a scalar tensor") && Catch::Contains("[4]"));

  CHECK_THROWS_WITH(TrainerOptions().max_epochs(0).validate(), "max_epochs must be >= 1, got 0");
  CHECK_THROWS_WITH(resolve_device("tpu"), Catch::Contains("got 'tpu'"));
  Trainer t(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(8), quiet_options());
  t.add_policy(std::make_shared<SmokeTestPolicy>());
  CHECK_THROWS_WITH(t.add_policy(std::make_shared<SmokeTestPolicy>()), Catch::Contains("already added"));
  CHECK_THROWS_AS(t.validate(), TrainingError);
}

TEST_CASE("a label out of range is reported with the step, the batch, its dataset examples and the targets' range",
          "[core][trainer]") {
  Seeded seeded;
  std::vector<int64_t> all(32);
  std::iota(all.begin(), all.end(), int64_t{0});
  const Batch whole = blobs(32)->get_batch(all);
  whole.target[21] = 7;  // three classes: 7 is out of range
  auto bad = std::make_shared<TensorDataset>(whole.input, whole.target);
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), bad, quiet_options(),
                  DataLoaderOptions().batch_size(8).shuffle(false));
  // Batch 2 of 4 holds examples 16..23; the three batches before it train.
  CHECK_THROWS_WITH(trainer.fit(), Catch::Contains("step 3, epoch 0, batch 2 of 4 (dataset examples 16, 17, 18") &&
                                       Catch::Contains("targets 0..7") && Catch::Contains("Target 7 is out of bounds") &&
                                       !Catch::Contains("Exception raised from"));
}

TEST_CASE("a bad trainer.device names the key and the value", "[core][trainer]") {
  CHECK_THROWS_WITH(resolve_device("gpu0"), Catch::Contains("trainer.device") && Catch::Contains("'gpu0'"));
  CHECK_THROWS_WITH(Trainer(Model(TinyNet(4, 8, 3).ptr(), cross_entropy()), sgd(), blobs(8), TrainerOptions().device("tpu").run_dir("")),
                    Catch::Contains("trainer.device must be auto, cpu, cuda or cuda:N, got 'tpu'"));
  CHECK(resolve_device("cpu").is_cpu());
}
