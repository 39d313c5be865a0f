#pragma once
// Shared test helpers: seeding, a tiny Cloneable model, synthetic data and a scratch directory.

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "frugal/frugal.hpp"

namespace frugal::testing {

/// Seeds the global RNG and makes CPU runs deterministic; construct one at the top of a test.
struct Seeded {
  explicit Seeded(uint64_t seed = 1234) {
    torch::manual_seed(seed);
    torch::set_num_threads(1);
  }
};

/// Two-layer MLP for classification; Cloneable so the smoke test can copy it.
struct TinyNetImpl : torch::nn::Cloneable<TinyNetImpl> {
  TinyNetImpl(int64_t in = 4, int64_t hidden = 8, int64_t out = 3, int64_t fc2_in = -1)
      : in_(in), hidden_(hidden), out_(out), fc2_in_(fc2_in < 0 ? hidden : fc2_in) {
    reset();
  }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(in_, hidden_));
    fc2 = register_module("fc2", torch::nn::Linear(fc2_in_, out_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }

  int64_t in_, hidden_, out_, fc2_in_;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TinyNet);

inline LossFn<TinyNetImpl> cross_entropy() {
  return [](TinyNetImpl& net, const Batch& b) { return torch::cross_entropy_loss(net.forward(b.input), b.target); };
}

inline MetricsFn<TinyNetImpl> accuracy_and_loss() {
  return [](TinyNetImpl& net, const Batch& b) {
    auto logits = net.forward(b.input);
    return BatchMetrics{{"loss", torch::cross_entropy_loss(logits, b.target)},
                        {"accuracy", (logits.argmax(1) == b.target).to(torch::kFloat).mean()}};
  };
}

/// `n` examples of 4 features in 3 classes, fixed by `seed`.
inline std::shared_ptr<TensorDataset> blobs(int64_t n, uint64_t seed = 7) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto targets = torch::randint(0, 3, {n}, gen, torch::kLong);
  auto centers = torch::tensor({{2.0f, 0.0f, 0.0f, 1.0f}, {0.0f, 2.0f, 1.0f, 0.0f}, {-2.0f, -2.0f, 0.0f, 0.0f}});
  auto inputs = centers.index_select(0, targets) + 0.5 * torch::randn({n, 4}, gen);
  return std::make_shared<TensorDataset>(inputs, targets);
}

inline OptimizerFactory sgd(double lr = 0.1) {
  return [lr](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(lr));
  };
}

/// Fresh empty directory under the test's working directory.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::current_path() / "scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// The whole content of `file` ("" if it cannot be read).
inline std::string bytes_of(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// All parameters concatenated into one flat tensor (copied).
inline torch::Tensor flat_parameters(const torch::nn::Module& m) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : m.parameters()) flat.push_back(p.detach().flatten().clone());
  return torch::cat(flat);
}

/// Fault injection: `edit` sees the gradient backward computes for `parameter` in each
/// micro-step (a tensor hook, before it is added to .grad) and returns it or a changed copy.
class GradientInjection : public Policy {
 public:
  using Edit = std::function<torch::Tensor(int64_t micro_step, const torch::Tensor& grad)>;
  GradientInjection(torch::Tensor parameter, Edit edit) : micro_step_(std::make_shared<int64_t>(-1)) {
    parameter.register_hook([step = micro_step_, edit = std::move(edit)](const torch::Tensor& grad) { return edit(*step, grad); });
  }
  std::string name() const override { return "inject_gradient"; }
  void on_step_begin(StepContext& ctx) override { *micro_step_ = ctx.state().micro_step; }

 private:
  std::shared_ptr<int64_t> micro_step_;  // shared with the hook, which may outlive the policy
};

}  // namespace frugal::testing
