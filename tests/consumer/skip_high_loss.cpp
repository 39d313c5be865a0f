// A policy of one's own, plugged into an installed Frugal through public headers only, next to the
// policies the config switches on (mixed precision, accumulation, checkpoints): the README's "use
// it in your own program", followed as written.
//
// SkipHighLoss skips the optimizer step while the step's loss is above a threshold and, after
// `max_skips` skips in a row, rolls back to its last snapshot and reads on past the data that led
// there. The data hide a block of corrupt examples (inputs x 10^4) in every epoch; the program
// exits 0 only if the model still learns the clean task, so it fails when the policy is off
// (--skip.enabled=false) or broken.
//
//   skip_high_loss --trainer.run_dir=run --precision.mode=bf16 --accumulation.steps=2 --checkpoint.enabled=true
#include <frugal/frugal.hpp>
#include <torch/torch.h>

#include <iostream>

namespace {

struct SkipHighLossOptions {
  bool enabled = true;
  double threshold = 20.0;       // a step's mean loss above this is skipped
  int64_t max_skips = 2;         // skips in a row before rolling back
  int64_t snapshot_every = 2;    // calm optimizer steps between snapshots
};

class SkipHighLoss : public frugal::Policy {
 public:
  explicit SkipHighLoss(SkipHighLossOptions options) : options_(options) {}
  std::string name() const override { return "skip_high_loss"; }

  void on_fit_begin(const frugal::TrainingRun& run) override {
    run_ = &run;
    last_good_ = std::make_shared<const frugal::TrainingSnapshot>(run.snapshot());
  }

  void before_optimizer_step(frugal::StepContext& ctx) override {
    const double loss = ctx.step_loss_sum().item<double>() / static_cast<double>(ctx.step_micro_steps());
    if (!(loss > options_.threshold)) {
      in_a_row_ = 0;
      return;
    }
    ctx.cancel_step("skip_high_loss: loss " + std::to_string(loss));
    ctx.discard_loss();
    ++skipped_;
    if (++in_a_row_ < options_.max_skips) return;
    in_a_row_ = 0;
    ++rollbacks_;
    ctx.roll_back(last_good_, run_->data_position());  // read on after the data that led here
  }

  void on_step_end(frugal::StepContext& ctx) override {
    if (!ctx.boundary() || ctx.step_cancelled() || ctx.rollback() || in_a_row_ > 0) return;
    if (ctx.state().step % options_.snapshot_every == 0) {
      last_good_ = std::make_shared<const frugal::TrainingSnapshot>(run_->snapshot());
    }
  }

  void collect_metrics(frugal::Metrics& metrics) override {
    metrics["skipped_high_loss"] = static_cast<double>(skipped_);
    metrics["rollbacks"] = static_cast<double>(rollbacks_);
  }

  // The counters survive a resume.
  void save_state(frugal::StateDict& state) const override {
    state["counters"] = torch::tensor({skipped_, rollbacks_}, torch::kLong);
  }
  void load_state(const frugal::StateDict& state) override {
    const auto it = state.find("counters");
    if (it == state.end()) return;
    // max: a rollback restores an older state, whose counts must not undo the rollback's own.
    skipped_ = std::max(skipped_, it->second[0].item<int64_t>());
    rollbacks_ = std::max(rollbacks_, it->second[1].item<int64_t>());
  }

  int64_t skipped() const { return skipped_; }
  int64_t rollbacks() const { return rollbacks_; }

 private:
  SkipHighLossOptions options_;
  const frugal::TrainingRun* run_ = nullptr;
  std::shared_ptr<const frugal::TrainingSnapshot> last_good_;
  int64_t in_a_row_ = 0, skipped_ = 0, rollbacks_ = 0;
};

// Three well-separated clusters; examples [corrupt_from, corrupt_from + 64) of every epoch have
// their inputs multiplied by 10^4 and their labels shifted by one (a bad shard).
std::shared_ptr<frugal::TensorDataset> make_data(int64_t n, uint64_t seed, int64_t corrupt_from) {
  torch::manual_seed(seed);
  const torch::Tensor centers = torch::tensor({{2.0f, 0.0f}, {-1.0f, 1.7f}, {-1.0f, -1.7f}});
  torch::Tensor y = torch::randint(0, 3, {n}, torch::kLong);
  torch::Tensor x = centers.index_select(0, y) + 0.5 * torch::randn({n, 2});
  if (corrupt_from >= 0) {
    x.narrow(0, corrupt_from, 64).mul_(1e4);
    y.narrow(0, corrupt_from, 64).add_(1).remainder_(3);
  }
  return std::make_shared<frugal::TensorDataset>(x, y);
}

}  // namespace

int main(int argc, char** argv) {
  return frugal::run_program("skip_high_loss", [&] {
    frugal::StandardOptions opts;
    opts.trainer.max_epochs(4).log_every_n_steps(8).device("cpu");
    opts.data.batch_size(16).shuffle(false);
    SkipHighLossOptions skip;
    frugal::Config config;
    frugal::bind(config, opts);
    config.bind("skip.enabled", skip.enabled, "Skip high-loss steps and roll back after a run of them");
    config.bind("skip.threshold", skip.threshold, "A step's mean loss above this is skipped");
    const frugal::ProgramStart start = frugal::start_program(argc, argv, config, opts, "a policy of one's own");
    if (start.cli.exit_code) {  // --help, --print-config: said, nothing to train
      std::cout << start.cli.message;
      return *start.cli.exit_code;
    }
    torch::manual_seed(1);
    torch::nn::Linear net(2, 3);
    frugal::Model model(net.ptr(), frugal::LossFn<torch::nn::LinearImpl>([](torch::nn::LinearImpl& n, const frugal::Batch& b) {
      return torch::cross_entropy_loss(n.forward(b.input), b.target);
    }), frugal::MetricsFn<torch::nn::LinearImpl>([](torch::nn::LinearImpl& n, const frugal::Batch& b) {
      return frugal::BatchMetrics{{"accuracy", (n.forward(b.input).argmax(1) == b.target).to(torch::kFloat).mean()}};
    }));
    frugal::Trainer trainer(model, [](torch::nn::Module& m) {
      return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.5));
    }, make_data(512, 3, 160), opts.trainer, opts.data);
    trainer.set_validation_data(make_data(512, 4, -1));
    if (start.cli.smoke_test_only) return frugal::run_smoke_test_only(trainer, opts.smoke_test);  // --smoke-test
    frugal::add_policies(trainer, opts, config.to_toml());
    auto policy = std::make_shared<SkipHighLoss>(skip);
    if (skip.enabled) trainer.add_policy(policy);
    const frugal::FitResult result = trainer.fit();
    const double accuracy = result.state.last_validation.at("accuracy");
    std::cout << "skip_high_loss: " << result.state.step << " steps, " << result.state.skipped_steps << " skipped, "
              << policy->rollbacks() << " rollbacks, validation accuracy " << accuracy << "\n";
    return accuracy >= 0.9 ? 0 : 1;
  });
}
