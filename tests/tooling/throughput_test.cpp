// Utilisation figures on the log lines: MFU from the FLOPs estimate, tokens/s, peak memory,
// and the data-wait / communication / compute split.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {
struct Figures : Policy {
  std::string name() const override { return "figures"; }
  void on_fit_begin(const TrainingRun& run) override { run_ = &run; }
  void collect_metrics(Metrics& metrics) override {
    seen.push_back(metrics);
    samples_per_s.push_back(run_->samples_per_s());
  }
  std::vector<Metrics> seen;
  std::vector<double> samples_per_s;  // the Trainer's, for the same window
  const TrainingRun* run_ = nullptr;
};
}  // namespace

TEST_CASE("known GPUs have their dense peaks, others none", "[tooling][throughput]") {
  CHECK(known_peak_tflops("NVIDIA H200", true) == 989.4);
  CHECK(known_peak_tflops("NVIDIA H100 80GB HBM3", false) == 66.9);
  CHECK(known_peak_tflops("NVIDIA H100 PCIe", true) == 756.0);
  CHECK(known_peak_tflops("NVIDIA A100-SXM4-80GB", true) == 312.0);
  CHECK_FALSE(known_peak_tflops("cpu", true));
  CHECK_FALSE(known_peak_tflops("Radeon", false));
}

TEST_CASE("MFU, TFLOP/s and tokens/s follow the per-sample estimates", "[tooling][throughput]") {
  Seeded seeded;
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(256),
                  TrainerOptions().log_every_n_steps(4).device("cpu").run_dir(""), DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<ThroughputPolicy>(
      ThroughputOptions().flops_per_sample(2e9).tokens_per_sample(128).peak_tflops(0.5)));
  auto figures = std::make_shared<Figures>();
  trainer.add_policy(figures);
  trainer.fit();
  REQUIRE(figures->seen.size() == 8);
  for (size_t i = 0; i < figures->seen.size(); ++i) {
    const Metrics& m = figures->seen[i];
    REQUIRE(m.count("mfu"));
    CHECK(m.at("tflops") > 0);
    CHECK(m.at("mfu") == Approx(m.at("tflops") / 0.5));
    // tokens/s and FLOP/s are the same samples/s times their per-sample figures.
    CHECK(m.at("tokens_per_s") / (m.at("tflops") * 1e12) == Approx(128.0 / 2e9));
    CHECK(m.at("tokens_per_s") == Approx(figures->samples_per_s[i] * 128.0));  // the Trainer's window, not another
    CHECK(m.at("peak_memory_mb") > 0);  // resident memory on the CPU
    CHECK(m.count("gpu_utilization") == 0);
  }
}

TEST_CASE("without a peak there is no MFU, and nothing without estimates", "[tooling][throughput]") {
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().log_every_n_steps(4).device("cpu").run_dir(""), DataLoaderOptions().batch_size(8));
  trainer.add_policy(std::make_shared<ThroughputPolicy>(ThroughputOptions().flops_per_sample(1e6)));
  auto figures = std::make_shared<Figures>();
  trainer.add_policy(figures);
  trainer.fit();
  REQUIRE_FALSE(figures->seen.empty());
  CHECK(figures->seen[0].count("tflops") == 1);
  CHECK(figures->seen[0].count("mfu") == 0);
  CHECK(figures->seen[0].count("tokens_per_s") == 0);
  CHECK_THROWS_WITH(ThroughputOptions().flops_per_sample(-1).validate(), Catch::Contains("flops_per_sample must be >= 0"));
}

TEST_CASE("the step time splits into data wait, communication and compute", "[tooling][throughput]") {
  const auto dir = scratch_dir("step_split");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().log_every_n_steps(2).device("cpu").run_dir(dir.string()), DataLoaderOptions().batch_size(8));
  trainer.fit();
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto r = nlohmann::json::parse(line);
    if (r["event"] != "train") continue;
    ++lines;
    const double data = r["data_wait_fraction"], comm = r["communication_fraction"], compute = r["compute_fraction"];
    CHECK(data >= 0);
    CHECK(comm >= 0);
    CHECK(compute >= 0);
    CHECK(data + comm + compute == Approx(1.0).margin(1e-9));
  }
  CHECK(lines == 4);
}
