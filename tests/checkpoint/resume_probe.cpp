// A small deterministic training run with every stateful piece a resume must restore (dropout
// RNG, momentum, fp16 loss scale, accumulation, shuffled data, LR schedule), checkpointing every
// 3 steps. tests/checkpoint/kill_resume_test.sh kills it at chosen points and restarts it.
//
//   resume_probe RUN_DIR OUT_FILE [kill-at-step N | kill-at-stage STAGE STEP | term-at-step N |
//                                  term-twice-at-step N | usr1-at-step N |
//                                  kill-at-upload-stage STAGE STEP | pause-at-upload-stage STAGE STEP |
//                                  term-at-upload-stage STAGE STEP |
//                                  pause-at-step N | pause-then-term-at-step N]
// With PROBE_REMOTE=s3://bucket/prefix the checkpoints also go to object storage
// (tests/remote/remote_resume_test.sh): PROBE_PAD_MB adds a buffer of that many MiB to the model,
// so that state.pt is a multipart upload; kill-at-upload-stage kills the process at that stage of
// the first upload of a checkpoint at or after STEP; pause-* wait at step N (or at that upload
// stage) for RUN_DIR/.go (announcing RUN_DIR/.paused), so that the test can stop or freeze the
// server, or start a second run on the prefix, meanwhile. PROBE_REMOTE_LEASE sets the prefix
// lease's seconds; PROBE_STEP_MS makes each step last that long.
// With PROBE_STATE_BITS=8 the optimizer is FusedAdamW with 8-bit states (tests/optim).
#include <torch/torch.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "frugal/frugal.hpp"
#include "support/fixtures.hpp"

namespace {

struct DropNetImpl : torch::nn::Cloneable<DropNetImpl> {
  DropNetImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(4, 32));
    drop = register_module("drop", torch::nn::Dropout(0.3));
    fc2 = register_module("fc2", torch::nn::Linear(32, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(drop->forward(torch::relu(fc1->forward(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(DropNet);

// At `step`: RUN_DIR/.paused appears, and the step waits for RUN_DIR/.go (then raises `signal`, if any).
struct PauseAtStep : frugal::Policy {
  PauseAtStep(int64_t step, std::string run_dir, int signal) : step_(step), run_dir_(std::move(run_dir)), signal_(signal) {}
  std::string name() const override { return "pause_at_step"; }
  void on_step_end(frugal::StepContext& ctx) override {
    if (!ctx.boundary() || ctx.state().step != step_ || fired_) return;
    fired_ = true;
    std::ofstream(run_dir_ + "/.paused") << step_;
    while (!std::filesystem::exists(run_dir_ + "/.go")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (signal_ != 0) std::raise(signal_);
  }
  int64_t step_;
  std::string run_dir_;
  int signal_;
  bool fired_ = false;
};

// Each optimizer step takes at least `ms` milliseconds (bench/remote.sh: uploads in flight).
struct SlowSteps : frugal::Policy {
  explicit SlowSteps(int64_t ms) : ms_(ms) {}
  std::string name() const override { return "slow_steps"; }
  void on_step_end(frugal::StepContext& ctx) override {
    if (ctx.boundary()) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }
  int64_t ms_;
};

struct SignalAtStep : frugal::Policy {
  SignalAtStep(int64_t step, int signal) : step_(step), signal_(signal) {}
  std::string name() const override { return "signal_at_step"; }
  void on_step_end(frugal::StepContext& ctx) override {
    if (ctx.boundary() && ctx.state().step == step_ && !fired_) {
      fired_ = true;
      std::raise(signal_);
    }
  }
  int64_t step_;
  int signal_;
  bool fired_ = false;
};

// Overflows two micro-steps, so that skipped steps and a backed-off loss scale are part of what a
// resume must restore.
std::shared_ptr<frugal::Policy> inject_overflow(const torch::nn::Module& net) {
  return std::make_shared<frugal::testing::GradientInjection>(net.parameters().front(), [](int64_t micro_step, const torch::Tensor& grad) {
    return micro_step == 5 || micro_step == 23 ? torch::full_like(grad, INFINITY) : grad;
  });
}

}  // namespace

int run(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: resume_probe RUN_DIR OUT_FILE [kill-at-step N | kill-at-stage STAGE STEP | term-at-step N]\n";
    return 2;
  }
  const std::string run_dir = argv[1], out_file = argv[2], mode = argc > 3 ? argv[3] : "";
  torch::set_num_threads(1);
  torch::manual_seed(42);
  DropNet net;
  const char* remote = std::getenv("PROBE_REMOTE");
  if (const char* pad = std::getenv("PROBE_PAD_MB")) {  // saved with the weights, never trained
    net->register_buffer("pad", torch::zeros({std::atoll(pad) * (int64_t{1} << 18)}));
  }
  frugal::Model model(net.ptr(), frugal::LossFn<DropNetImpl>([](DropNetImpl& n, const frugal::Batch& b) {
    return torch::cross_entropy_loss(n.forward(b.input), b.target);
  }));
  const bool eight_bit = std::getenv("PROBE_STATE_BITS") != nullptr && std::string(std::getenv("PROBE_STATE_BITS")) == "8";
  frugal::Trainer trainer(model, [eight_bit](torch::nn::Module& m) -> std::unique_ptr<torch::optim::Optimizer> {
    if (eight_bit) {  // the weights' moments in 8 bits, the biases' in fp32
      return std::make_unique<frugal::FusedAdamW>(m.parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.01),
                                                  frugal::StateQuantization().bits(8).min_elements(64));
    }
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  }, frugal::testing::blobs(200), frugal::TrainerOptions().device("cpu").run_dir(run_dir).max_epochs(4).max_steps(40).log_every_n_steps(10),
     frugal::DataLoaderOptions().batch_size(8).seed(11));
  trainer.set_lr_schedule(frugal::lr::cosine(4, 40, 0.1));
  trainer.add_policy(std::make_shared<frugal::GradientAccumulationPolicy>(frugal::GradientAccumulationOptions().steps(2)));
  trainer.add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(
      frugal::MixedPrecisionOptions().mode(frugal::Precision::fp16).autocast(false).scaler(
          frugal::GradScalerOptions().growth_interval(4))));
  trainer.add_policy(inject_overflow(*net));
  if (const char* ms = std::getenv("PROBE_STEP_MS")) trainer.add_policy(std::make_shared<SlowSteps>(std::atoll(ms)));
  auto checkpoint_options = frugal::CheckpointOptions().every_n_steps(3).keep_last(2);
  if (remote != nullptr) {
    checkpoint_options.remote().url(remote).part_mb(5);
    if (const char* deadline = std::getenv("PROBE_REMOTE_DEADLINE")) checkpoint_options.remote().deadline_seconds(std::atof(deadline));
    if (const char* lease = std::getenv("PROBE_REMOTE_LEASE")) checkpoint_options.remote().lease_seconds(std::atof(lease));
  }
  auto checkpoint = std::make_shared<frugal::CheckpointPolicy>(checkpoint_options);
  if (mode == "kill-at-upload-stage" && argc > 5) {
    const std::string stage = argv[4];
    const int64_t step = std::stoll(argv[5]);
    checkpoint->set_destination_stage_observer([stage, step](const std::string& s, int64_t at) {
      if (s == stage && at >= step) {
        std::cerr << "killing at upload stage " << stage << " of step " << at << std::endl;
        std::raise(SIGKILL);
      }
    });
  }
  if (mode == "pause-at-upload-stage" && argc > 5) {  // mid-upload, holding the prefix's lease
    const std::string stage = argv[4];
    const int64_t step = std::stoll(argv[5]);
    checkpoint->set_destination_stage_observer([stage, step, run_dir, fired = std::make_shared<bool>(false)](const std::string& s, int64_t at) {
      if (*fired || s != stage || at < step) return;
      *fired = true;
      std::ofstream(run_dir + "/.paused") << at;
      while (!std::filesystem::exists(run_dir + "/.go")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
  }
  if (mode == "term-at-upload-stage" && argc > 5) {  // a pre-emption while an older checkpoint uploads
    const std::string stage = argv[4];
    const int64_t step = std::stoll(argv[5]);
    // (The uploader calls a copy of the observer each time: the flag is shared.)
    checkpoint->set_destination_stage_observer([stage, step, fired = std::make_shared<bool>(false)](const std::string& s, int64_t at) {
      if (*fired || s != stage || at < step) return;
      *fired = true;
      std::cerr << "SIGTERM at upload stage " << stage << " of step " << at << std::endl;
      std::raise(SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));  // the training thread saves the newest meanwhile
    });
  }
  if ((mode == "pause-at-step" || mode == "pause-then-term-at-step") && argc > 4) {
    trainer.add_policy(std::make_shared<PauseAtStep>(std::stoll(argv[4]), run_dir, mode == "pause-at-step" ? 0 : SIGTERM));
  }
  if (mode == "kill-at-stage" && argc > 5) {
    const std::string stage = argv[4];
    const int64_t step = std::stoll(argv[5]);
    checkpoint->set_stage_observer([stage, step](const std::string& s, int64_t at) {
      if (s == stage && at == step) std::raise(SIGKILL);
    });
  }
  if (mode == "kill-at-step" && argc > 4) trainer.add_policy(std::make_shared<SignalAtStep>(std::stoll(argv[4]), SIGKILL));
  if ((mode == "term-at-step" || mode == "term-twice-at-step") && argc > 4) {
    trainer.add_policy(std::make_shared<SignalAtStep>(std::stoll(argv[4]), SIGTERM));
  }
  if (mode == "usr1-at-step" && argc > 4) trainer.add_policy(std::make_shared<SignalAtStep>(std::stoll(argv[4]), SIGUSR1));
  if (mode == "term-twice-at-step" && argc > 4) {  // a second SIGTERM arrives while the checkpoint is written
    const int64_t step = std::stoll(argv[4]);
    checkpoint->set_stage_observer([step](const std::string& s, int64_t at) {
      if (s == "state.pt" && at == step) std::raise(SIGTERM);
    });
  }
  frugal::add_checkpointing(trainer, checkpoint);
  std::optional<decltype(trainer.fit())> fitted;
  try {
    fitted.emplace(trainer.fit());
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  auto& result = *fitted;
  std::cout << "steps " << result.state.step << " skipped " << result.state.skipped_steps << " stop: "
            << result.state.stop_reason.value_or("-") << "\n";
  if (result.state.stop_reason && result.state.stop_reason->find("pre-empted") != std::string::npos) return 0;
  auto params = frugal::testing::flat_parameters(*net).contiguous();
  std::ofstream(out_file, std::ios::binary).write(static_cast<const char*>(params.data_ptr()), params.numel() * 4);
  return 0;
}

int main(int argc, char** argv) { frugal::exit_process(run(argc, argv)); }
