// TensorBoard event files: framing checksums, and a Trainer run read back by TensorBoard itself.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;

TEST_CASE("CRC-32C matches the standard check value", "[tooling][tensorboard]") {
  const std::string check = "123456789";
  CHECK(frugal::detail::crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(frugal::detail::crc32c("", 0) == 0u);
}

TEST_CASE("a Trainer's metrics read back with TensorBoard's event loader", "[tooling][tensorboard][python]") {
  Seeded seeded;
  const auto dir = scratch_dir("tensorboard_run");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy(), accuracy_and_loss()), sgd(), blobs(64),
                  TrainerOptions().max_epochs(2).log_every_n_steps(2).device("cpu").run_dir(dir.string()),
                  DataLoaderOptions().batch_size(8));
  trainer.set_validation_data(blobs(16, 3));
  trainer.fit();
  const nlohmann::json tb = run_python_reference("read_tensorboard.py", (dir / "tensorboard").string());
  CHECK(tb["version"] == "brain.Event:2");
  // The same records as metrics.jsonl: every train line's loss at its step, every validation.
  std::vector<std::pair<int64_t, double>> jsonl_loss, tb_loss, tb_validation;
  std::ifstream lines(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(lines, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["event"] == "train") jsonl_loss.emplace_back(record["step"].get<int64_t>(), record["loss"].get<double>());
  }
  for (const auto& s : tb["scalars"]) {
    if (s[0] == "train/loss") tb_loss.emplace_back(s[1].get<int64_t>(), s[2].get<double>());
    if (s[0] == "validation/accuracy") tb_validation.emplace_back(s[1].get<int64_t>(), s[2].get<double>());
  }
  REQUIRE(jsonl_loss.size() == 8);  // 16 steps, a line every 2
  REQUIRE(tb_loss.size() == jsonl_loss.size());
  for (size_t i = 0; i < tb_loss.size(); ++i) {
    CHECK(tb_loss[i].first == jsonl_loss[i].first);
    CHECK(tb_loss[i].second == Approx(jsonl_loss[i].second).epsilon(1e-6));  // stored as float
  }
  CHECK(tb_validation.size() == 2);
  CHECK(tb_validation.back().first == 16);
  std::set<std::string> tags;
  for (const auto& s : tb["scalars"]) tags.insert(s[0].get<std::string>());
  for (const char* tag : {"train/lr", "train/samples_per_s", "train/data_wait_fraction", "train/compute_fraction", "validation/loss"}) {
    CHECK(tags.count(tag) == 1);
  }
  CHECK(tags.count("train/step") == 0);  // the step is the x axis, not a scalar
}

TEST_CASE("trainer.tensorboard = false writes no event files", "[tooling][tensorboard]") {
  const auto dir = scratch_dir("tensorboard_off");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(16),
                  TrainerOptions().device("cpu").run_dir(dir.string()).tensorboard(false), DataLoaderOptions().batch_size(8));
  trainer.fit();
  CHECK(std::filesystem::exists(dir / "metrics.jsonl"));
  CHECK_FALSE(std::filesystem::exists(dir / "tensorboard"));
}
