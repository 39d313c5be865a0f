// Launched N times by torchrun (tests/distributed/sharding_test.sh): sharded optimizer state and
// gradients (distributed.shard) over gloo, checked against unsharded data parallelism.
//
//   sharding_probe MODE [key=value ...]
//   parity  in one process, the same training unsharded and sharded (shard=optimizer|gradients):
//           parameters after every step equal to relative 1e-6, with optimizer=sgd|adamw|fused,
//           norm clipping, fp16 loss scaling whose loss overflows on rank 1 at step 3, and
//           accumulation over 2 micro-batches; the per-rank optimizer state (and, sharding the
//           gradients, the gradients) about 1/N of the unsharded run's
//   train   checkpoints every 3 steps in dir=... (and remote=s3://... if given), shard=off|optimizer|gradients, batch=B per rank;
//           rank 0 writes the final parameters to out=FILE (one number a line)
#include <torch/torch.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>

#include "frugal/frugal.hpp"
#include "support/fixtures.hpp"
#include "support/probe_args.hpp"

namespace {

struct ProbeNetImpl : torch::nn::Cloneable<ProbeNetImpl> {
  explicit ProbeNetImpl(int64_t hidden) : hidden_(hidden) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(4, hidden_));
    fc2 = register_module("fc2", torch::nn::Linear(hidden_, hidden_));
    fc3 = register_module("fc3", torch::nn::Linear(hidden_, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc3->forward(torch::tanh(fc2->forward(torch::tanh(fc1->forward(x))))); }
  int64_t hidden_;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(ProbeNet);

// Records the parameters after each optimizer step, and makes rank 1's loss overflow at step 3.
struct Recorder : frugal::Policy {
  Recorder(bool overflow, int64_t rank) : overflow_(overflow), rank_(rank) {}
  std::string name() const override { return "recorder"; }
  torch::Tensor transform_loss(frugal::StepContext& ctx, torch::Tensor loss) override {
    // With 2 micro-batches a step, micro-steps 4 and 5 make step 3.
    if (overflow_ && rank_ == 1 && ctx.state().micro_step == 4) return loss * INFINITY;
    return loss;
  }
  void on_after_optimizer_step(frugal::StepContext& ctx) override { params.push_back(frugal::testing::flat_parameters(ctx.module())); }
  bool overflow_;
  int64_t rank_;
  std::vector<torch::Tensor> params;
};

// sgd8, fused8: 8-bit states for tensors of at least `min8` elements (tests/optim).
frugal::OptimizerFactory optimizer_named(const std::string& name, int64_t min8) {
  return [name, min8](torch::nn::Module& m) -> std::unique_ptr<torch::optim::Optimizer> {
    const auto eight = frugal::StateQuantization().bits(8).min_elements(min8);
    // Two groups, as a weight-decay split makes: biases without decay.
    if (name == "sgd" || name == "sgd8") {
      auto options = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3);
      auto groups = frugal::weight_decay_groups(m, options, frugal::is_bias_or_norm);
      if (name == "sgd8") return std::make_unique<frugal::QuantizedSGD>(groups, options, eight);
      return std::make_unique<torch::optim::SGD>(groups, options);
    }
    auto options = torch::optim::AdamWOptions(0.01).weight_decay(0.01);
    auto groups = frugal::weight_decay_groups(m, options, frugal::is_bias_or_norm);
    if (name == "fused") return std::make_unique<frugal::FusedAdamW>(groups, options);
    if (name == "fused8") return std::make_unique<frugal::FusedAdamW>(groups, options, eight);
    if (name == "adamw") return std::make_unique<torch::optim::AdamW>(groups, options);
    throw std::runtime_error("unknown optimizer " + name);
  };
}

struct Run {
  ProbeNet net{nullptr};
  std::shared_ptr<Recorder> recorder;
  std::shared_ptr<frugal::MemoryReportPolicy> memory;
  frugal::FitResult result;
};

Run train(const frugal::testing::ProbeArgs& args, std::shared_ptr<frugal::Communicator> comm, frugal::ShardMode shard, bool parity) {
  Run run;
  const int64_t rank = comm ? comm->rank() : 0;
  torch::manual_seed(static_cast<uint64_t>(100 + rank));  // rank 0's weights win the broadcast
  run.net = ProbeNet(args.num("hidden", 24));
  frugal::Model model(run.net.ptr(), frugal::LossFn<ProbeNetImpl>([](ProbeNetImpl& n, const frugal::Batch& b) {
    return torch::cross_entropy_loss(n.forward(b.input), b.target);
  }));
  frugal::TrainerOptions options;
  options.device("cpu").max_epochs(4).max_steps(args.num("max_steps", 8)).log_every_n_steps(4);
  options.run_dir(parity ? "" : args.get("dir", "run"));  // two runs may not share a directory
  frugal::Trainer trainer(model, optimizer_named(args.get("optimizer", "adamw"), args.num("min8", 256)), frugal::testing::blobs(240), options,
                          frugal::DataLoaderOptions().batch_size(args.num("batch", 4)).seed(3));
  if (comm) {
    frugal::add_data_parallel(trainer, std::make_shared<frugal::DataParallelPolicy>(
        comm, frugal::DataParallelOptions().bucket_cap_mb(512.0 / (1024 * 1024)).shard(shard)));  // several buckets
  }
  trainer.add_policy(std::make_shared<frugal::GradientAccumulationPolicy>(frugal::GradientAccumulationOptions().steps(parity ? 2 : 1)));
  if (parity) {
    trainer.add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(
        frugal::MixedPrecisionOptions().mode(frugal::Precision::fp16).autocast(false)));
  }
  trainer.add_policy(std::make_shared<frugal::GradientClippingPolicy>(
      frugal::GradientClippingOptions().mode(frugal::ClipMode::norm).max_norm(parity ? 0.05 : 1.0)));
  run.recorder = std::make_shared<Recorder>(parity, rank);
  trainer.add_policy(run.recorder);
  run.memory = std::make_shared<frugal::MemoryReportPolicy>();
  trainer.add_policy(run.memory);
  if (!parity) {
    frugal::add_checkpointing(trainer, std::make_shared<frugal::CheckpointPolicy>(
                                           frugal::CheckpointOptions().every_n_steps(3).keep_last(4).remote(frugal::RemoteOptions().url(args.get("remote", "")))));
  }
  run.result = trainer.fit();
  return run;
}

int run(const frugal::testing::ProbeArgs& args) {
  torch::set_num_threads(1);
  const frugal::World world = frugal::detect_world(frugal::process_environment());
  std::shared_ptr<frugal::Communicator> comm;
  if (world.world_size > 1) comm = frugal::connect(world, frugal::CommunicatorOptions().backend(frugal::CollectiveBackend::gloo).timeout_seconds(60));
  const int64_t r = world.rank, n = world.world_size;
  auto fail = [&](const std::string& what) {
    std::cout << "rank " << r << ": FAIL " << what << std::endl;
    return 1;
  };

  if (args.mode == "parity") {
    const frugal::ShardMode shard = frugal::parse_enum_option<frugal::ShardMode>(args.get("shard", "gradients"), "shard");
    Run whole = train(args, comm, frugal::ShardMode::off, true);
    Run sharded = train(args, comm, shard, true);
    if (whole.recorder->params.size() != sharded.recorder->params.size() || whole.recorder->params.empty()) {
      return fail("not as many steps sharded as unsharded");
    }
    if (sharded.result.state.skipped_steps != 1 || whole.result.state.skipped_steps != 1) {
      return fail(c10::str("skipped steps: unsharded ", whole.result.state.skipped_steps, ", sharded ", sharded.result.state.skipped_steps,
                           "; expected 1 (the overflow at step 3)"));
    }
    double worst = 0;
    for (size_t i = 0; i < whole.recorder->params.size(); ++i) {
      const auto& ref = whole.recorder->params[i];
      worst = std::max(worst, ((sharded.recorder->params[i] - ref).norm() / ref.norm()).item<double>());
    }
    if (!(worst <= 1e-6)) return fail(c10::str("relative difference sharded vs unsharded ", worst, " > 1e-6"));
    const auto& a = whole.memory->footprint();
    const auto& b = sharded.memory->footprint();
    const double state_ratio = static_cast<double>(b.optimizer_state_bytes) / static_cast<double>(a.optimizer_state_bytes);
    const double grad_ratio = static_cast<double>(b.gradient_bytes) / static_cast<double>(a.gradient_bytes);
    std::cout << "rank " << r << ": parity ok: " << whole.recorder->params.size() << " steps, relative difference " << worst
              << "; optimizer state " << b.optimizer_state_bytes << " of " << a.optimizer_state_bytes << " bytes (" << state_ratio
              << "x), gradients " << b.gradient_bytes << " of " << a.gradient_bytes << " bytes (" << grad_ratio << "x)" << std::endl;
    const double share = 1.0 / static_cast<double>(n);
    // 8-bit states: pieces start on blocks of 256, so small models split less evenly.
    if (state_ratio > share + static_cast<double>(args.num("slack_percent", 10)) / 100.0) return fail(c10::str("optimizer state ", state_ratio, "x of unsharded, expected about ", share));
    if (shard == frugal::ShardMode::gradients && grad_ratio > share / 2 + static_cast<double>(args.num("slack_percent", 10)) / 100.0) {  // unsharded holds .grad and the buckets
      return fail(c10::str("gradients ", grad_ratio, "x of unsharded, expected about ", share / 2));
    }
    return 0;
  }
  if (args.mode == "train") {
    Run run = train(args, comm, frugal::parse_enum_option<frugal::ShardMode>(args.get("shard", "off"), "shard"), false);
    std::cout << "rank " << r << ": stopped at step " << run.result.state.step << std::endl;
    if (r == 0 && args.values.count("out")) {
      std::ofstream out(args.get("out", ""));
      const torch::Tensor flat = frugal::testing::flat_parameters(*run.net);
      out << std::setprecision(9);
      for (int64_t i = 0; i < flat.numel(); ++i) out << flat[i].item<float>() << "\n";
    }
    return 0;
  }
  return fail("unknown mode " + args.mode);
}

}  // namespace

int main(int argc, char** argv) { frugal::exit_process(frugal::testing::probe_main(argc, argv, "parity", run)); }
