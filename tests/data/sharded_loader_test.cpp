#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include <set>
#include <thread>

#include "support/fixtures.hpp"
#include "support/shards.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> epoch_numbers(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<int64_t> seen;
  while (auto batch = loader.next()) {
    const auto n = numbers_of(*batch);
    seen.insert(seen.end(), n.begin(), n.end());
  }
  return seen;
}

std::shared_ptr<ShardedDataset> numbered_dataset(const std::string& name, int64_t n, ShardedDatasetOptions options = {}) {
  const auto dir = scratch_dir(name);
  write_numbered_shards(dir, n, 4096);
  return std::make_shared<ShardedDataset>(dir, numbered_decoder(), options);
}

}  // namespace

TEST_CASE("sharded loader: every sample exactly once per epoch, a new order each epoch, the same for any worker count", "[data]") {
  auto data = numbered_dataset("loader_once", 203, ShardedDatasetOptions().shuffle_buffer(32));
  REQUIRE(data->shards().size() > 3);
  std::vector<std::vector<int64_t>> by_workers;
  for (const int64_t workers : {0, 1, 4}) {
    DataLoader loader(data, DataLoaderOptions().batch_size(16).seed(5).num_workers(workers).prefetch_batches(3));
    std::vector<int64_t> both;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      const auto seen = epoch_numbers(loader, epoch);
      REQUIRE(seen.size() == 203);
      CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 203);
      both.insert(both.end(), seen.begin(), seen.end());
    }
    CHECK(!std::equal(both.begin(), both.begin() + 203, both.begin() + 203));  // epochs differ
    by_workers.push_back(both);
  }
  CHECK(by_workers[0] == by_workers[1]);
  CHECK(by_workers[0] == by_workers[2]);
}

TEST_CASE("sharded order: shards are permuted and reads stay within the shuffle buffer", "[data]") {
  auto data = numbered_dataset("loader_locality", 300, ShardedDatasetOptions().shuffle_buffer(1));
  const auto order = data->shuffled_order(3, 0);
  // With a buffer of one, each shard is read front to back in one run.
  std::vector<int64_t> firsts;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || order[i] != order[i - 1] + 1) firsts.push_back(order[i]);
  }
  CHECK(firsts.size() == data->shards().size());
  CHECK(!std::is_sorted(firsts.begin(), firsts.end()));
  // With a buffer of B, an index comes out at most ~B places from where it went in.
  ShardedDataset buffered(data->shards().front().shard.parent_path(), numbered_decoder(), ShardedDatasetOptions().shuffle_buffer(16));
  const auto sequence = buffered.shuffled_order(3, 0);  // same shard permutation as `order`
  std::map<int64_t, int64_t> position_in_stream;
  for (size_t i = 0; i < order.size(); ++i) position_in_stream[order[i]] = static_cast<int64_t>(i);
  int64_t displaced_early = 0;
  for (size_t i = 0; i < sequence.size(); ++i) {
    if (position_in_stream[sequence[i]] > static_cast<int64_t>(i) + 16) ++displaced_early;
  }
  CHECK(displaced_early == 0);  // nothing is emitted before it was read
  CHECK(sequence != order);
}

TEST_CASE("sharded loader: two simulated ranks read disjoint, complete, equal shares", "[data]") {
  auto data = numbered_dataset("loader_ranks", 150);
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 2; ++rank) {
    DataLoader loader(data, DataLoaderOptions().batch_size(8).seed(1).num_workers(2).num_replicas(2).rank(rank));
    const auto seen = epoch_numbers(loader, 3);
    CHECK(seen.size() == 75);
    all.insert(all.end(), seen.begin(), seen.end());
  }
  CHECK(std::set<int64_t>(all.begin(), all.end()).size() == 150);
}

TEST_CASE("sharded loader: a restored position continues with the exact next samples, reading none it skips", "[data]") {
  const auto dir = scratch_dir("loader_resume");
  write_numbered_shards(dir, 120, 4096);
  auto reference_data = std::make_shared<ShardedDataset>(dir, numbered_decoder());
  DataLoader reference(reference_data, DataLoaderOptions().batch_size(10).seed(9).num_workers(3));
  reference.start_epoch(1);
  std::vector<std::vector<int64_t>> batches;
  DataPosition middle;
  while (auto batch = reference.next()) {
    batches.push_back(numbers_of(*batch));
    if (batches.size() == 5) middle = reference.position();
  }
  auto resumed_data = std::make_shared<ShardedDataset>(dir, numbered_decoder());
  DataLoader resumed(resumed_data, DataLoaderOptions().batch_size(10).seed(9).num_workers(3));
  resumed.restore(middle);
  CHECK(resumed_data->samples_read() == 0);
  std::vector<std::vector<int64_t>> rest;
  while (auto batch = resumed.next()) rest.push_back(numbers_of(*batch));
  CHECK(rest == std::vector<std::vector<int64_t>>(batches.begin() + 5, batches.end()));
  CHECK(resumed_data->samples_read() == 70);  // the 7 batches left, nothing before them
}

TEST_CASE("sharded loader: a worker's error reaches the training loop with file and offset, or is skipped and counted", "[data]") {
  const auto dir = scratch_dir("loader_bad_sample");
  ShardWriter writer(dir);
  for (int64_t i = 0; i < 20; ++i) {
    Sample s = numbered_sample(i);
    if (i == 13) s.fields["npy"] = "not an npy array";
    writer.write(s);
  }
  writer.finish();
  auto strict = std::make_shared<ShardedDataset>(dir, numbered_decoder());
  DataLoader loader(strict, DataLoaderOptions().batch_size(4).shuffle(false).num_workers(2));
  CHECK(loader.next().has_value());
  CHECK(loader.next().has_value());
  CHECK(loader.next().has_value());
  // The decoder names the member; the dataset adds the shard file and the sample's byte offset.
  const ShardIndex& shard = strict->shards().front();
  const std::string at = shard.shard.string() + ": at byte offset " + std::to_string(shard.offsets[13]) + ": sample '000013'";
  CHECK_THROWS_WITH(loader.next(), Catch::Contains(at) && Catch::Contains("000013.npy") && Catch::Contains("bad magic"));
  CHECK(loader.next().has_value());  // the loader goes on after the failed batch

  auto lenient = std::make_shared<ShardedDataset>(dir, numbered_decoder(), ShardedDatasetOptions().on_corrupt(OnCorrupt::skip));
  DataLoader skipping(lenient, DataLoaderOptions().batch_size(4).shuffle(false).num_workers(2));
  int64_t examples = 0;
  while (auto batch = skipping.next()) examples += batch->size();
  CHECK(examples == 19);
  CHECK(lenient->samples_skipped() == 1);
}

TEST_CASE("offline-augmented shards present one variant per sample per epoch, each variant once in K epochs", "[data]") {
  const auto dir = scratch_dir("loader_variants");
  write_numbered_shards(dir / "plain", 24);
  ShardWriter out(dir / "augmented");
  const auto result = write_augmented_shards(list_shards(dir / "plain"), out, 3, jitter_npy("npy", 0.5), 11);
  CHECK(result.samples == 24);
  ShardedDataset augmented(dir / "augmented", numbered_decoder(), ShardedDatasetOptions().variants(3));
  for (int64_t index : {0, 7, 23}) {
    std::set<std::string> variants;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const Sample s = augmented.read_sample(index, FetchContext{epoch, 4, nullptr, false});
      CHECK(s.fields.at("cls") == std::to_string(index % 3));  // shared by every variant
      CHECK(s.fields.count("aug0.npy") == 0);
      variants.insert(s.fields.at("npy"));
      CHECK(s.fields.at("npy") == augmented.read_sample(index, FetchContext{epoch + 3, 4, nullptr, false}).fields.at("npy"));
    }
    CHECK(variants.size() == 3);
  }
  // The variants are the source plus noise, and rewriting with the same seed gives the same shards.
  const torch::Tensor x = decode_npy(augmented.read_sample(7, FetchContext{0, 4, nullptr, false}).fields.at("npy"), "x");
  CHECK((x - torch::tensor({7.0f, -7.0f})).abs().max().item<float>() > 0.0f);
  CHECK((x - torch::tensor({7.0f, -7.0f})).abs().max().item<float>() < 3.0f);
  ShardWriter again(dir / "again");
  write_augmented_shards(list_shards(dir / "plain"), again, 3, jitter_npy("npy", 0.5), 11);
  ShardedDataset second(dir / "again", numbered_decoder(), ShardedDatasetOptions().variants(3));
  const FetchContext epoch_1{1, 4, nullptr, false};
  CHECK(second.read_sample(5, epoch_1).fields == augmented.read_sample(5, epoch_1).fields);
  ShardedDataset wrong_k(dir / "plain", numbered_decoder(), ShardedDatasetOptions().variants(2));
  CHECK_THROWS_WITH(wrong_k.read_sample(0), Catch::Contains("no augmented variant"));
}

namespace {

// A dataset whose every batch takes `delay` to make: the loop waits unless workers prefetch.
struct SlowDataset : TensorDataset {
  SlowDataset(torch::Tensor x, torch::Tensor y, std::chrono::milliseconds delay) : TensorDataset(x, y), delay_(delay) {}
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    std::this_thread::sleep_for(delay_);
    return TensorDataset::get_batch(indices);
  }
  std::chrono::milliseconds delay_;
};

}  // namespace

TEST_CASE("the loader reports the time the loop waited for data, and workers hide it", "[data]") {
  auto slow = std::make_shared<SlowDataset>(torch::randn({64, 4}), torch::zeros({64}, torch::kLong),
                                            std::chrono::milliseconds(20));
  DataLoader direct(slow, DataLoaderOptions().batch_size(8));
  while (direct.next()) {
  }
  CHECK(direct.wait_seconds() > 8 * 0.018);
  DataLoader prefetching(slow, DataLoaderOptions().batch_size(8).num_workers(4).prefetch_batches(8));
  prefetching.next();  // starts the workers
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a "training step" during which they work
  const double before = prefetching.wait_seconds();
  while (prefetching.next()) {
  }
  CHECK(prefetching.wait_seconds() - before < 0.02);

  // The Trainer puts it in the metrics.
  const auto dir = scratch_dir("loader_wait_metrics");
  Seeded seeded;
  TinyNet net;
  Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(), slow,
                  TrainerOptions().device("cpu").run_dir(dir.string()).log_every_n_steps(4).max_epochs(1),
                  DataLoaderOptions().batch_size(8));
  trainer.fit();
  std::ifstream again(dir / "metrics.jsonl");
  std::string line;
  nlohmann::json row = nlohmann::json::object();
  while (std::getline(again, line) && row.value("event", "") != "train") row = nlohmann::json::parse(line);
  REQUIRE(row.value("event", "") == "train");
  CHECK(row.at("data_wait_ms").get<double>() > 15.0);
  CHECK(row.at("data_wait_fraction").get<double>() > 0.5);
}

TEST_CASE("on CUDA the workers hand out page-locked batches, or copy them to the device ahead on side streams", "[data]") {
  if (!torch::cuda::is_available()) {
    std::puts("SKIPPED: no CUDA device here (page-locked memory needs the CUDA driver)");
    return;
  }
  auto data = blobs(64);
  DataLoader loader(data, DataLoaderOptions().batch_size(16).num_workers(2).pin_memory(true));
  const auto batch = loader.next();
  CHECK(batch->input.is_pinned());
  CHECK(batch->target.is_pinned());
  const Batch on_gpu = batch->to(torch::Device(torch::kCUDA), /*non_blocking=*/true);
  CHECK(torch::equal(on_gpu.input.cpu(), batch->input));

  // Copied ahead by the workers on their side streams: the same batches, already on the device.
  DataLoader plain(data, DataLoaderOptions().batch_size(16).seed(3));
  DataLoader ahead(data, DataLoaderOptions().batch_size(16).seed(3).num_workers(2));
  ahead.copy_ahead_to(torch::Device(torch::kCUDA));
  while (auto expected = plain.next()) {
    const auto got = ahead.next();
    REQUIRE(got.has_value());
    CHECK(got->input.is_cuda());
    CHECK(torch::equal((got->input * 2).cpu(), expected->input * 2));  // used on the main stream
    CHECK(torch::equal(got->target.cpu(), expected->target));
  }
}

TEST_CASE("a Trainer on shards with worker threads resumes from its checkpoint bitwise equal to an uninterrupted run", "[data]") {
  torch::set_num_threads(1);
  const auto root = scratch_dir("loader_trainer_resume");
  write_numbered_shards(root / "shards", 90, 2048);
  auto run = [&](const fs::path& dir, int64_t max_steps, uint64_t init_seed, TinyNet& net) {
    torch::manual_seed(init_seed);  // each run starts from other weights: the resume must replace them
    net = TinyNet(2, 8, 3);
    auto data = std::make_shared<ShardedDataset>(root / "shards", numbered_decoder(), ShardedDatasetOptions().shuffle_buffer(16));
    Trainer trainer(Model(net.ptr(), cross_entropy()), sgd(0.001), data,
                    TrainerOptions().device("cpu").run_dir(dir.string()).max_epochs(10).max_steps(max_steps),
                    DataLoaderOptions().batch_size(8).seed(5).num_workers(3).prefetch_batches(2));
    add_checkpointing(trainer, std::make_shared<CheckpointPolicy>(CheckpointOptions().every_n_steps(5)));
    return trainer.fit();
  };
  TinyNet clean{nullptr}, resumed{nullptr};
  run(root / "clean", 20, 1, clean);
  CHECK(run(root / "split", 12, 1, resumed).state.step == 12);  // 12 of 12 batches an epoch: at an epoch's end
  CHECK(run(root / "split", 17, 2, resumed).state.step == 17);  // mid-epoch stop
  CHECK(run(root / "split", 20, 3, resumed).state.step == 20);
  CHECK(torch::equal(flat_parameters(*clean), flat_parameters(*resumed)));
}

TEST_CASE("flip_crop augmentation makes distinct same-size JPEG variants, and bad --op specs are refused", "[data]") {
  const auto dir = scratch_dir("augment_jpeg");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const torch::Tensor image = (torch::rand({48, 64, 3}, gen) * 255).to(torch::kUInt8);
  ShardWriter source(dir / "plain");
  source.write({"img0", {{"jpg", encode_jpeg(image)}, {"cls", "2"}}});
  source.finish();
  ShardWriter out(dir / "aug");
  write_augmented_shards(list_shards(dir / "plain"), out, 3, parse_augmentation("flip_crop:jpg:0.5"), 1);
  ShardScanner scan(list_shards(dir / "aug").front());
  const Sample s = *scan.next();
  CHECK(s.fields.at("cls") == "2");
  std::set<std::string> variants;
  for (int k = 0; k < 3; ++k) {
    const std::string& jpeg = s.fields.at(c10::str("aug", k, ".jpg"));
    CHECK(decode_jpeg(jpeg, "variant").sizes() == image.sizes());
    variants.insert(jpeg);
  }
  CHECK(variants.size() == 3);
  CHECK_THROWS_WITH(parse_augmentation("blur:jpg"), Catch::Contains("blur:jpg"));
  CHECK_THROWS_WITH(parse_augmentation("jitter:npy:lots"), Catch::Contains("'lots' is not a number"));
  CHECK_THROWS_AS(parse_augmentation("flip_crop:jpg:1.5"), OptionError);
}
