// Exact resume in-process: a run stopped at step 12 and continued to 20 from its checkpoint ends
// with the weights of an uninterrupted 20-step run, with fp16 loss scaling, accumulation,
// shuffling and an LR schedule; mismatches are refused clearly; fp16 storage is smaller.
#include <catch2/catch.hpp>

#include <fstream>

#include "support/checkpointed_run.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

struct Run : CheckpointedRun {
  std::shared_ptr<MixedPrecisionPolicy> precision;
};

Run make_run(const fs::path& dir, int64_t max_steps, uint64_t init_seed, int64_t hidden = 16) {
  Run r{checkpointed_run(TrainerOptions().device("cpu").run_dir(dir.string()).max_epochs(10).max_steps(max_steps),
                         CheckpointOptions().every_n_steps(5), CheckpointedRunOptions().init_seed(init_seed).hidden(hidden)),
        nullptr};
  r.precision = add_stateful_policies(r);
  return r;
}

}  // namespace

TEST_CASE("a run stopped and resumed from its checkpoint ends bitwise equal to an uninterrupted run", "[checkpoint][resume]") {
  torch::set_num_threads(1);
  const auto root = scratch_dir("resume_exact");
  Run clean = make_run(root / "clean", 20, 1);
  clean.trainer->fit();

  Run first = make_run(root / "split", 12, 1);  // same start as the clean run
  auto r1 = first.trainer->fit();
  CHECK(r1.state.step == 12);  // 6 steps into epoch 1 (6 boundaries an epoch): mid-epoch
  Run second = make_run(root / "split", 20, 3);
  auto r2 = second.trainer->fit();
  CHECK(r2.state.step == 20);
  CHECK(r2.state.micro_step == 40);
  CHECK(second.precision->scaler().scale_value() == clean.precision->scaler().scale_value());
  CHECK(torch::equal(flat_parameters(*clean.net), flat_parameters(*second.net)));

  // The check can fail: a run that does not resume ends elsewhere.
  Run off = make_run(root / "off", 20, 3);
  off.trainer->fit();
  CHECK_FALSE(torch::equal(flat_parameters(*clean.net), flat_parameters(*off.net)));
}

TEST_CASE("two identical runs write byte-identical checkpoint files (optimizer state keyed by position, not address)",
          "[checkpoint][resume]") {
  torch::set_num_threads(1);
  const auto root = scratch_dir("deterministic_files");
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  Run a = make_run(root / "a", 10, 1);
  a.trainer->fit();
  Run b = make_run(root / "b", 10, 1);
  b.trainer->fit();
  const auto dir_a = CheckpointStore(root / "a" / "checkpoints").find_latest_valid()->info.dir;
  const auto dir_b = CheckpointStore(root / "b" / "checkpoints").find_latest_valid()->info.dir;
  for (const char* file : {"optimizer.pt", "state.pt"}) {
    INFO(file);
    const std::string bytes = read(dir_a / file);
    CHECK(bytes.size() > 0);
    CHECK(bytes == read(dir_b / file));
  }
}

TEST_CASE("a checkpoint of another architecture is refused with the reason, and another world size keeps the epoch's position",
          "[checkpoint][resume]") {
  const auto root = scratch_dir("resume_mismatch");
  Run writer = make_run(root, 4, 1);
  writer.trainer->fit();
  Run wider = make_run(root, 8, 1, /*hidden=*/32);
  CHECK_THROWS_WITH(wider.trainer->fit(), Catch::Contains("'fc1.weight' has shape [32, 4] in this model but [16, 4]"));

  // Written by 2 ranks with micro-batches of 4, 3 batches into epoch 1: 24 examples of the epoch
  // read. This run reads 8 a step on one rank: it goes on at batch 3.
  TrainingSnapshot s = writer.trainer->snapshot();
  s.world_size = 2;
  s.data = {1, 3, s.data.seed, 4};
  Trainer& trainer = *writer.trainer;
  trainer.restore(s);
  CHECK(trainer.state().epoch == s.state.epoch);
  TrainingSnapshot after = trainer.snapshot();
  CHECK(after.data.epoch == 1);
  CHECK(after.data.batch_index == 24 / trainer.data_options().batch_size());
}

TEST_CASE("fp16 weight storage halves the weights on disk and still resumes (not exactly)", "[checkpoint][fp16]") {
  torch::manual_seed(0);
  TinyNet net(4, 16384, 3);
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), blobs(16), TrainerOptions().device("cpu").run_dir(""));
  const auto root = scratch_dir("fp16_storage");
  CheckpointStore full(root / "fp32"), half(root / "fp16");
  auto a = full.write(trainer.snapshot(), {});
  auto b = half.write(trainer.snapshot(), CheckpointWriteOptions{Precision::fp16, "", {}});
  const double ratio = static_cast<double>(fs::file_size(b.dir / "state.pt")) / static_cast<double>(fs::file_size(a.dir / "state.pt"));
  CHECK(ratio < 0.6);
  const auto before = flat_parameters(*net);
  trainer.restore(half.read(half.find_latest_valid()->info));
  const auto after = flat_parameters(*net);
  CHECK(torch::allclose(before, after, 1e-3, 1e-3));
  CHECK(after.scalar_type() == torch::kFloat);
}

TEST_CASE("an async write that fails surfaces in the training loop", "[checkpoint][async]") {
  const auto root = scratch_dir("async_error");
  std::ofstream(root / "blocker") << "a file where the checkpoint directory should be";
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64), TrainerOptions().device("cpu").run_dir(""),
                  DataLoaderOptions().batch_size(8));
  add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(
      CheckpointOptions().dir((root / "blocker" / "checkpoints").string()).every_n_steps(2).async(true).resume(false)));
  CHECK_THROWS_AS(trainer.fit(), CheckpointError);
  CHECK(trainer.state().step < 8);  // stopped by the error, before the end of the epoch
}

TEST_CASE("a time cadence saves when the interval has passed", "[checkpoint][cadence]") {
  const auto root = scratch_dir("time_cadence");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(32), TrainerOptions().device("cpu").run_dir(root.string()),
                  DataLoaderOptions().batch_size(8));
  auto policy = std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_minutes(1e-9).keep_last(0).at_end(false));
  add_checkpointing(trainer, policy);
  trainer.fit();
  CHECK(policy->store().list().size() == 4);  // every boundary is past a 60-microsecond interval
  Trainer slow(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(32), TrainerOptions().device("cpu").run_dir((root / "b").string()),
               DataLoaderOptions().batch_size(8));
  auto hourly = std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_minutes(60).at_end(false));
  add_checkpointing(slow, hourly);
  slow.fit();
  CHECK(hourly->store().list().empty());
}

TEST_CASE("a snapshot is a deep copy: training after it does not change it", "[checkpoint][snapshot]") {
  for (bool adam : {false, true}) {
    Seeded seeded;
    TinyNet net;
    OptimizerFactory make = [adam](torch::nn::Module& m) -> std::unique_ptr<torch::optim::Optimizer> {
      if (adam) return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(0.01));
      return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    };
    Trainer trainer(Model(net.ptr(), cross_entropy()), make, blobs(32), TrainerOptions().device("cpu").run_dir(""),
                    DataLoaderOptions().batch_size(8));
    trainer.fit();
    const TrainingSnapshot snapshot = trainer.snapshot();
    CHECK(snapshot.optimizer_copy != nullptr);  // a known optimizer type: copied, not serialized on this thread
    const std::string before = snapshot.optimizer_bytes();
    const auto weights = snapshot.tensors.at("model/fc1.weight").clone();
    auto batch = blobs(8, 3)->get_batch({0, 1, 2, 3, 4, 5, 6, 7});
    torch::cross_entropy_loss(net->forward(batch.input), batch.target).backward();
    trainer.optimizer().step();  // moves the live weights and optimizer state in place
    CHECK(snapshot.optimizer_bytes() == before);
    CHECK(torch::equal(snapshot.tensors.at("model/fc1.weight"), weights));
    CHECK_FALSE(torch::equal(net->fc1->weight, weights));
  }
}

TEST_CASE("checkpoint.resume=false starts over even where checkpoints exist", "[checkpoint][resume]") {
  const auto root = scratch_dir("resume_opt_out");
  Run writer = make_run(root, 6, 1);
  writer.trainer->fit();
  Run fresh = make_run(root, 6, 1);
  fresh.checkpoint = std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(5).resume(false));
  Trainer trainer(Model(fresh.net.ptr(), cross_entropy()), sgd(), blobs(96),
                  TrainerOptions().device("cpu").run_dir(root.string()).max_steps(2), DataLoaderOptions().batch_size(8));
  add_checkpointing(trainer, fresh.checkpoint);
  auto result = trainer.fit();
  CHECK(result.state.step == 2);  // from 0, not from the checkpoint of step 6
  CHECK(CheckpointStore(root / "checkpoints").find_latest_valid()->info.step == 6);  // the newer one is still there
}

TEST_CASE("a checkpoint policy that is not the resume source is refused before training", "[checkpoint][resume]") {
  Seeded seeded;
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(16),
                  TrainerOptions().device("cpu").run_dir(scratch_dir("not_the_source").string()), DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<CheckpointPolicy>());  // writes, but nothing would resume from it
  CHECK_THROWS_WITH(trainer.fit(), Catch::Contains("add_checkpointing(trainer, policy)"));
  CHECK(trainer.state().step == 0);
}
