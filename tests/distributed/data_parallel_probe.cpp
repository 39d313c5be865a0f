// Launched N times by torchrun (tests/distributed/data_parallel_test.sh): trains a small MLP with
// the DataParallelPolicy over gloo and checks, on every rank, what data parallelism promises.
//
//   data_parallel_probe MODE [key=value ...]
//   parity    after each step the parameters are equal on all ranks, and equal (relative 1e-6)
//             to one process trained on the concatenated batches; with accumulate=K, the
//             micro-steps that end no window start no collective
//   overflow  fp16 scaling; rank 1's loss overflows at step 3: every rank skips that step
//   buffers   BatchNorm statistics after each step: rank 0's (broadcast), the mean (average),
//             or each rank's own (off)
//   die       rank 1 exits at micro-step 5: the others fail with a CommunicationError
//   resume    checkpoints in dir=...; prints a digest of the final weights
//   preempt   rank 1 alone gets SIGUSR1 at step 4: every rank stops there, rank 0 checkpoints
//   (shard=optimizer|gradients: the same with sharded optimizer state; every rank writes its shard)
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <map>

#include "frugal/frugal.hpp"
#include "support/counting_communicator.hpp"
#include "support/fixtures.hpp"
#include "support/probe_args.hpp"

namespace {

using frugal::testing::CountingCommunicator;

struct ProbeNetImpl : torch::nn::Cloneable<ProbeNetImpl> {
  explicit ProbeNetImpl(bool norm) : norm_(norm) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(4, 16));
    if (norm_) bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = fc1->forward(x);
    if (norm_) h = bn->forward(h);
    return fc2->forward(torch::tanh(h));
  }
  bool norm_;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(ProbeNet);

// Watches every micro-step: the collectives it started, the weights after each optimizer step,
// and the mode's fault (an overflow, a signal, a dying rank).
struct Recorder : frugal::Policy {
  Recorder(const frugal::testing::ProbeArgs& args, CountingCommunicator* counter, int64_t rank) : args_(args), counter_(counter), rank_(rank) {}
  std::string name() const override { return "recorder"; }
  void on_step_begin(frugal::StepContext& ctx) override {
    if (args_.mode == "die" && rank_ == 1 && ctx.state().micro_step == 5) std::_Exit(0);
    at_begin_ = counter_ ? counter_->collectives() : 0;
  }
  torch::Tensor transform_loss(frugal::StepContext& ctx, torch::Tensor loss) override {
    // micro_step counts the passes already run: 2 means this is the third (step 3, no accumulation).
    if (args_.mode == "overflow" && rank_ == 1 && ctx.state().micro_step == 2) return loss * INFINITY;
    // From the fifth micro-step on, rank 1 alone "runs out of memory" on micro-batches above 2.
    TORCH_CHECK_WITH(OutOfMemoryError, !(args_.mode == "oom" && rank_ == 1 && ctx.state().micro_step >= 4 && ctx.batch().size() > 2),
                     "simulated out of memory on rank 1");
    if (ctx.boundary()) local_buffers_ = buffers(ctx.module());  // after the forward pass, before the buffers' sync
    return loss;
  }
  void on_after_optimizer_step(frugal::StepContext& ctx) override {
    params.push_back(frugal::testing::flat_parameters(ctx.module()));
    if (local_buffers_.defined()) {
      before_sync.push_back(local_buffers_);
      after_sync.push_back(buffers(ctx.module()));
    }
  }
  void on_step_end(frugal::StepContext& ctx) override {
    if (counter_) collectives.emplace_back(ctx.boundary(), counter_->collectives() - at_begin_);
    if (args_.mode == "preempt" && rank_ == 1 && ctx.boundary() && ctx.state().step == 4) std::raise(SIGUSR1);
  }
  static torch::Tensor buffers(torch::nn::Module& m) {
    std::vector<torch::Tensor> all;
    for (const auto& b : m.buffers()) {
      if (b.is_floating_point()) all.push_back(b.detach().flatten().clone());
    }
    return all.empty() ? torch::Tensor() : torch::cat(all);
  }

  const frugal::testing::ProbeArgs& args_;
  CountingCommunicator* counter_;
  int64_t rank_;
  int64_t at_begin_ = 0;
  torch::Tensor local_buffers_;
  std::vector<torch::Tensor> params, before_sync, after_sync;
  std::vector<std::pair<bool, int64_t>> collectives;  // (boundary, collectives started) per micro-step
};

struct Run {
  ProbeNet net{nullptr};
  std::shared_ptr<Recorder> recorder;
  std::shared_ptr<frugal::CheckpointPolicy> checkpoint;
  frugal::FitResult result;
  int64_t final_batch_size = 0;
};

// One fit: with `communicator` data-parallel (batch b per rank), without it one process on
// batches of b x world (the concatenation of the ranks' batches).
Run train(const frugal::testing::ProbeArgs& args, std::shared_ptr<CountingCommunicator> communicator, int64_t world) {
  Run run;
  const int64_t rank = communicator ? communicator->rank() : 0;
  torch::manual_seed(static_cast<uint64_t>(100 + rank));  // rank 0's weights must win the broadcast
  run.net = ProbeNet(args.mode == "buffers");
  frugal::Model model(run.net.ptr(), frugal::LossFn<ProbeNetImpl>([](ProbeNetImpl& n, const frugal::Batch& b) {
    return torch::cross_entropy_loss(n.forward(b.input), b.target);
  }));
  const int64_t batch = 4 * (communicator ? 1 : world);
  frugal::TrainerOptions options;
  options.device("cpu").max_epochs(3).max_steps(args.num("max_steps", 12)).log_every_n_steps(5);
  // No run directory otherwise: each rank's one-process reference fit is a run of its own, and two
  // runs may not share a directory.
  options.run_dir(args.mode == "resume" || args.mode == "preempt" ? args.get("dir", "run") : "");
  frugal::Trainer trainer(model, [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }, frugal::testing::blobs(240), options, frugal::DataLoaderOptions().batch_size(batch).seed(3));
  if (communicator) {
    frugal::add_data_parallel(trainer, std::make_shared<frugal::DataParallelPolicy>(
        communicator, frugal::DataParallelOptions()
                          .bucket_cap_mb(256.0 / (1024 * 1024))  // a few buckets even for this model
                          .overlap(args.get("overlap", "true") == "true")
                          .buffers(args.get("buffers", "broadcast") == "average" ? frugal::BufferSync::average
                                   : args.get("buffers", "broadcast") == "off"   ? frugal::BufferSync::off
                                                                                 : frugal::BufferSync::broadcast)
                          .shard(frugal::parse_enum_option<frugal::ShardMode>(args.get("shard", "off"), "shard"))));
  }
  const int64_t accumulate = args.num("accumulate", 1);
  if (accumulate > 1 || args.mode == "oom") {
    trainer.add_policy(std::make_shared<frugal::GradientAccumulationPolicy>(
        frugal::GradientAccumulationOptions().steps(accumulate).halve_batch_on_oom(args.mode == "oom")));
  }
  if (args.mode == "overflow") {
    trainer.add_policy(std::make_shared<frugal::MixedPrecisionPolicy>(
        frugal::MixedPrecisionOptions().mode(frugal::Precision::fp16).autocast(false)));
  }
  run.recorder = std::make_shared<Recorder>(args, communicator.get(), rank);
  trainer.add_policy(run.recorder);
  if (args.mode == "resume" || args.mode == "preempt") {
    run.checkpoint = std::make_shared<frugal::CheckpointPolicy>(frugal::CheckpointOptions().every_n_steps(3).keep_last(2));
    frugal::add_checkpointing(trainer, run.checkpoint);
  }
  run.result = trainer.fit();
  run.final_batch_size = trainer.data_options().batch_size();
  return run;
}

bool equal_on_all_ranks(frugal::Communicator& comm, const torch::Tensor& local) {
  std::vector<torch::Tensor> root{local.clone()};
  comm.broadcast(root, 0);
  return !comm.any(!torch::equal(root[0], local));  // every rank gives the same answer
}

int run(const frugal::testing::ProbeArgs& args) {
  torch::set_num_threads(1);
  const frugal::World world = frugal::detect_world(frugal::process_environment());
  auto raw = frugal::connect(world, frugal::CommunicatorOptions().backend(frugal::CollectiveBackend::gloo).timeout_seconds(args.mode == "die" ? 5 : 60));
  auto comm = std::make_shared<CountingCommunicator>(raw);
  const int64_t r = world.rank, n = world.world_size;
  auto fail = [&](const std::string& what) {
    std::cout << "rank " << r << ": FAIL " << what << std::endl;
    return 1;
  };

  if (args.mode == "die") {
    const auto start = std::chrono::steady_clock::now();
    try {
      train(args, comm, n);
      return fail("training went on after rank 1 died");
    } catch (const frugal::CommunicationError& e) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cout << "rank " << r << ": failed after " << seconds << " s: " << std::string(e.what()).substr(0, 160) << std::endl;
      return seconds < 30 ? 7 : 1;  // 7: the expected, prompt failure
    }
  }

  Run dp = train(args, comm, n);
  const auto& rec = *dp.recorder;
  const torch::Tensor steps = torch::stack(rec.params);
  if (!equal_on_all_ranks(*raw, steps)) return fail("parameters differ between ranks after some step");

  if (args.mode == "parity" || args.mode == "oom") {
    Run single = train(args, nullptr, n);
    if (single.recorder->params.size() != rec.params.size()) return fail("not as many steps as the single process");
    double worst = 0;
    for (size_t i = 0; i < rec.params.size(); ++i) {
      const auto& ref = single.recorder->params[i];
      worst = std::max(worst, ((rec.params[i] - ref).norm() / ref.norm()).item<double>());
    }
    if (!(worst <= 1e-6)) return fail(c10::str("relative difference to one process ", worst, " > 1e-6"));
    for (const auto& [boundary, count] : rec.collectives) {
      if (!boundary && count != 0) return fail(c10::str("a micro-step without optimizer step started ", count, " collectives"));
      if (boundary && count == 0) return fail("a boundary micro-step started no collective");
    }
    std::cout << "rank " << r << ": parity ok: " << rec.params.size() << " steps, " << rec.collectives.size()
              << " micro-steps, relative difference to one process " << worst << std::endl;
    if (args.mode == "oom") {
      if (dp.final_batch_size != 2) return fail(c10::str("micro-batch ", dp.final_batch_size, " at the end, expected 2"));
      std::cout << "rank " << r << ": oom ok: every rank went on with micro-batches of " << dp.final_batch_size << std::endl;
    }
  } else if (args.mode == "overflow") {
    if (dp.result.state.skipped_steps != 1) return fail(c10::str(dp.result.state.skipped_steps, " skipped steps, expected 1"));
    if (!torch::equal(rec.params[2], rec.params[1])) return fail("step 3 changed the weights although it overflowed");
    std::cout << "rank " << r << ": overflow ok: skipped " << dp.result.state.skipped_steps << " of "
              << dp.result.state.step << " steps" << std::endl;
  } else if (args.mode == "buffers") {
    const std::string how = args.get("buffers", "broadcast");
    bool expected_all = true, equal_all = true;
    for (size_t i = 0; i < rec.after_sync.size(); ++i) {
      std::vector<torch::Tensor> ranks{rec.before_sync[i].clone()};
      torch::Tensor expected = rec.before_sync[i];
      if (how == "broadcast") {
        raw->broadcast(ranks, 0);
        expected = ranks[0];
      } else if (how == "average") {
        raw->all_reduce(ranks);
        expected = ranks[0] / static_cast<double>(n);
      }
      expected_all = expected_all && torch::allclose(rec.after_sync[i], expected, 1e-6, 1e-7);
      const bool equal = equal_on_all_ranks(*raw, rec.after_sync[i]);  // a collective: call it on every rank
      equal_all = equal_all && equal;
    }
    if (!expected_all) return fail("buffers after a step are not the " + how + " of the ranks' buffers");
    std::cout << "rank " << r << ": buffers " << how << " ok, equal on all ranks: " << (equal_all ? "yes" : "no") << std::endl;
  } else if (args.mode == "resume" || args.mode == "preempt") {
    const auto flat = frugal::testing::flat_parameters(*dp.net);
    std::cout << "rank " << r << ": stopped at step " << dp.result.state.step << ": "
              << dp.result.state.stop_reason.value_or("-") << std::endl;
    std::cout << "rank " << r << ": digest " << c10::str(std::hash<std::string_view>{}(std::string_view(
                                                       static_cast<const char*>(flat.data_ptr()), flat.numel() * 4)))
              << std::endl;
    if (r == 0 && dp.checkpoint->store().latest()) {
      std::cout << "latest checkpoint " << dp.checkpoint->store().latest()->filename().string() << std::endl;
    }
  } else {
    return fail("unknown mode " + args.mode);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { frugal::exit_process(frugal::testing::probe_main(argc, argv, "parity", run)); }
