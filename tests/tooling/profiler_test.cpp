// Continuous profiling: captures at the configured steps only, valid Chrome traces, summaries.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "support/fixtures.hpp"

using namespace frugal;
using namespace frugal::testing;

namespace {
// Which micro-steps ran with the profiler on (checked inside the step, after the policies' begin hooks).
struct ProfilerWatch : Policy {
  std::string name() const override { return "profiler_watch"; }
  torch::Tensor transform_loss(StepContext& ctx, torch::Tensor loss) override {  // inside the step, after the forward pass
    if (torch::autograd::profiler::isProfilerEnabledInMainThread()) profiled.push_back(ctx.state().micro_step + 1);
    return loss;
  }
  std::vector<int64_t> profiled;
};
}  // namespace

TEST_CASE("the profiler records the configured steps and nothing in between", "[tooling][profiler]") {
  Seeded seeded;
  const auto dir = scratch_dir("profiler_run");
  Trainer trainer(Model(TinyNet(4, 64, 3).ptr(), cross_entropy()), sgd(), blobs(160),
                  TrainerOptions().max_epochs(1).log_every_n_steps(100).device("cpu").run_dir(dir.string()),
                  DataLoaderOptions().batch_size(8));
  auto profiler = std::make_shared<ProfilerPolicy>(ProfilerOptions().every_n_steps(8).steps(2).skip_steps(0).top(5));
  trainer.add_policy(profiler);
  auto watch = std::make_shared<ProfilerWatch>();
  trainer.add_policy(watch);
  trainer.fit();  // 20 steps: due after steps 8 and 16, recording steps 9-10 and 17-18
  CHECK(watch->profiled == std::vector<int64_t>{9, 10, 17, 18});
  REQUIRE(profiler->traces().size() == 2);
  CHECK(profiler->traces()[0] == dir / "profiles" / "step_9.trace.json");
  for (const auto& trace : profiler->traces()) {
    const auto json = nlohmann::json::parse(bytes_of(trace));  // a Chrome/Perfetto trace
    REQUIRE(json.contains("traceEvents"));
    bool has_linear = false;
    for (const auto& e : json["traceEvents"]) has_linear = has_linear || (e.contains("name") && e["name"] == "aten::addmm");
    CHECK(has_linear);
    auto top = trace;
    top.replace_filename(trace.filename().string().replace(trace.filename().string().find(".trace.json"), 11, ".top.txt"));
    CHECK_THAT(bytes_of(top), Catch::Contains("self ms") && Catch::Contains("aten::"));
  }
  // An operator's self time is part of its total time.
  double self = 0;
  for (const auto& op : profiler->last_summary()) {
    CHECK(op.self_ms >= 0);
    CHECK(op.self_ms <= op.total_ms + 1e-9);
    self += op.self_ms;
  }
  CHECK(self > 0);
  int profiles = 0;
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) profiles += nlohmann::json::parse(line)["event"] == "profile";
  CHECK(profiles == 2);
}

TEST_CASE("idle, the profiler policy never turns the profiler on", "[tooling][profiler]") {
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().max_epochs(2).device("cpu").run_dir(""), DataLoaderOptions().batch_size(8));
  auto profiler = std::make_shared<ProfilerPolicy>(ProfilerOptions().every_n_steps(1000));
  trainer.add_policy(profiler);
  auto watch = std::make_shared<ProfilerWatch>();
  trainer.add_policy(watch);
  trainer.fit();
  CHECK(watch->profiled.empty());
  CHECK(profiler->traces().empty());
}

TEST_CASE("every_epoch captures after the warm-up steps of each epoch", "[tooling][profiler]") {
  const auto dir = scratch_dir("profiler_epochs");
  Trainer trainer(Model(TinyNet().ptr(), cross_entropy()), sgd(), blobs(64),
                  TrainerOptions().max_epochs(2).device("cpu").run_dir(dir.string()), DataLoaderOptions().batch_size(8));
  auto profiler = std::make_shared<ProfilerPolicy>(ProfilerOptions().every_epoch(true).skip_steps(3).steps(1));
  trainer.add_policy(profiler);
  auto watch = std::make_shared<ProfilerWatch>();
  trainer.add_policy(watch);
  trainer.fit();  // 8 micro-steps per epoch
  CHECK(watch->profiled == std::vector<int64_t>{4, 12});
  CHECK_THROWS_WITH(ProfilerOptions().steps(0).validate(), Catch::Contains("steps must be >= 1"));
}

TEST_CASE("GPU kernels are told compute-bound or memory-bound by name", "[tooling][profiler]") {
  CHECK(is_compute_bound_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"));
  CHECK(is_compute_bound_kernel("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>(Params)"));
  CHECK(is_compute_bound_kernel("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>"));
  // cuBLAS's own Hopper kernels (CUDA 12.8 and later), as profiled on an H200.
  CHECK(is_compute_bound_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"));
  CHECK(is_compute_bound_kernel("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0"));
  CHECK(is_compute_bound_kernel("sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_f16f16_f16f32_f32_nhwckrsc_nhwc"));
  CHECK_FALSE(is_compute_bound_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"));
  CHECK_FALSE(is_compute_bound_kernel("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"));
  CHECK_FALSE(is_compute_bound_kernel("Memcpy HtoD (Pinned -> Device)"));
}
