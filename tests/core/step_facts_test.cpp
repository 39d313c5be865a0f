// What policies tell each other through StepContext: facts (the precision in effect, the gradient
// norm) and standing decisions the Trainer keeps from step to step (the learning-rate factor, a
// precision to continue in), across a rollback and a resume.
#include <catch2/catch.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {

double group_lr(const StepContext& ctx) { return ctx.optimizer().param_groups().front().options().get_lr(); }

// At step `lower_at` lowers the learning rate to half for good, and at step `back_at` rolls back
// to the state the fit began with; records each step's learning rate as the optimizer sees it.
struct LowerThenRollBack : Policy {
  std::string name() const override { return "lower_then_roll_back"; }
  void on_fit_begin(const TrainingRun& run) override { start = std::make_shared<const TrainingSnapshot>(run.snapshot()); }
  void on_step_begin(StepContext& ctx) override { lrs.push_back(group_lr(ctx)); }
  void before_optimizer_step(StepContext& ctx) override {
    const int64_t step = ctx.state().step + 1;
    if (step == lower_at) ctx.set_lr_factor(0.5);
    if (step == back_at && !rolled_back) {
      rolled_back = true;
      ctx.roll_back(start, start->data);
    }
  }
  int64_t lower_at = -1, back_at = -1;
  bool rolled_back = false;
  std::shared_ptr<const TrainingSnapshot> start;
  std::vector<double> lrs;
};

}  // namespace

TEST_CASE("a learning-rate factor stands until changed, across a rollback and a resume", "[core][trainer]") {
  Seeded seeded;
  const auto dir = scratch_dir("standing_lr");
  auto make = [&](int64_t max_steps) {
    auto trainer = std::make_unique<Trainer>(Model(TinyNet().ptr(), cross_entropy()), sgd(0.1), blobs(64),
                                             TrainerOptions().device("cpu").run_dir(dir.string()).max_epochs(10).max_steps(max_steps),
                                             DataLoaderOptions().batch_size(8));
    // A flat schedule: the rate is base x schedule x factor after every step and on resume (the
    // optimizer's saved state alone would bring 0.05 back without one).
    trainer->set_lr_schedule([](int64_t) { return 1.0; });
    return trainer;
  };
  auto first = make(4);
  auto policy = std::make_shared<LowerThenRollBack>();
  policy->lower_at = 2;
  policy->back_at = 3;
  first->add_policy(policy);
  add_checkpointing(*first, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(1).async(false)));
  first->fit();
  // Steps 1-2 at 0.1; step 3 at 0.05 rolls back to the start, and steps 1-4 run again at 0.05:
  // the rollback restored the start, not its factor.
  REQUIRE(policy->lrs.size() == 7);
  CHECK(policy->lrs[0] == Approx(0.1));
  CHECK(policy->lrs[1] == Approx(0.1));
  for (size_t i = 2; i < 7; ++i) CHECK(policy->lrs[i] == Approx(0.05));

  // Resumed from the last checkpoint: the factor comes back with it.
  auto resumed = make(6);
  auto watch = std::make_shared<LowerThenRollBack>();
  resumed->add_policy(watch);
  add_checkpointing(*resumed, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(1).async(false)));
  resumed->fit();
  REQUIRE_FALSE(watch->lrs.empty());
  CHECK(watch->lrs.front() == Approx(0.05));
  CHECK(resumed->state().lr == Approx(0.05));
}

TEST_CASE("policies publish the precision and the gradient norm for others to read", "[core][trainer]") {
  Seeded seeded;
  struct Reader : Policy {
    std::string name() const override { return "reader"; }
    // In the precision phase, so before clipping: the gradients are unscaled and not clipped yet.
    PolicyPhase phase() const override { return PolicyPhase::precision; }
    void clip_gradients(StepContext& ctx) override {
      std::vector<torch::Tensor> norms;
      for (const auto& p : ctx.parameters()) norms.push_back(p.grad().norm());
      expected_norm = torch::stack(norms).norm().item<double>();
    }
    void before_optimizer_step(StepContext& ctx) override {
      precisions.push_back(ctx.precision());
      norms.push_back(ctx.gradient_norm().defined() ? ctx.gradient_norm().item<double>() : -1.0);
      expected.push_back(expected_norm);
    }
    double expected_norm = 0.0;
    std::vector<std::optional<Precision>> precisions;
    std::vector<double> norms, expected;
  };
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(32),
                  TrainerOptions().device("cpu").run_dir("").max_steps(3), DataLoaderOptions().batch_size(8));
  auto reader = std::make_shared<Reader>();
  trainer.add_policy(std::make_shared<MixedPrecisionPolicy>(MixedPrecisionOptions().mode(Precision::bf16)));
  trainer.add_policy(reader);
  trainer.add_policy(std::make_shared<GradientClippingPolicy>(GradientClippingOptions().mode(ClipMode::norm).max_norm(0.01)));
  trainer.fit();
  REQUIRE(reader->norms.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(reader->precisions[i] == Precision::bf16);
    CHECK(reader->norms[i] == Approx(reader->expected[i]).epsilon(1e-5));
  }

  // Without the precision policy nothing claims a precision (fp32), and without clipping no norm.
  Trainer plain(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(32), TrainerOptions().device("cpu").run_dir("").max_steps(1),
                DataLoaderOptions().batch_size(8));
  auto alone = std::make_shared<Reader>();
  plain.add_policy(alone);
  plain.fit();
  REQUIRE(alone->norms.size() == 1);
  CHECK_FALSE(alone->precisions[0].has_value());
  CHECK(alone->norms[0] == -1.0);
}

TEST_CASE("a precision request holds after a rollback restores the precision policy's older state", "[core][trainer]") {
  Seeded seeded;
  struct AskThenRollBack : Policy {
    std::string name() const override { return "ask_then_roll_back"; }
    void on_fit_begin(const TrainingRun& run) override { start = std::make_shared<const TrainingSnapshot>(run.snapshot()); }
    void before_optimizer_step(StepContext& ctx) override {
      seen.push_back(ctx.precision());
      if (ctx.state().step + 1 == 2 && !asked) {
        asked = true;
        ctx.request_precision(Precision::bf16, "test");
        ctx.roll_back(start, start->data);
      }
    }
    bool asked = false;
    std::shared_ptr<const TrainingSnapshot> start;
    std::vector<std::optional<Precision>> seen;
  };
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().device("cpu").run_dir("").max_steps(3), DataLoaderOptions().batch_size(8));
  auto precision = std::make_shared<MixedPrecisionPolicy>(MixedPrecisionOptions().mode(Precision::fp16).autocast(false));
  auto asker = std::make_shared<AskThenRollBack>();
  trainer.add_policy(precision);
  trainer.add_policy(asker);
  trainer.fit();
  // Steps 1 and 2 in fp16; step 2 asks for bf16 and goes back to the start, where the precision
  // policy's saved state says fp16: the request still holds for steps 1-3 run again.
  REQUIRE(asker->seen.size() == 5);
  CHECK(asker->seen[0] == Precision::fp16);
  CHECK(asker->seen[1] == Precision::fp16);
  CHECK(asker->seen[2] == Precision::bf16);
  CHECK(asker->seen[4] == Precision::bf16);
  CHECK(precision->precision() == Precision::bf16);
}
