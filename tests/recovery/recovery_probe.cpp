// A classifier trained with the standard options (so every recovery.* key and torchrun work)
// on data whose examples in chosen ranges are corrupted: NaN inputs (a non-finite loss) or
// inputs x 100 (a loss spike). tests/recovery/recovery_test.sh drives it.
//
//   recovery_probe --recovery.enabled=true --probe.corrupt=320-335:nan,960-975:spike
//   ... --probe.kill_after_rollback=1   # SIGKILL once the 1st rollback's checkpoint is written
// On success prints "final: loss L validation_loss V checksum C" (C: the weights' sum).
#include <torch/torch.h>

#include <csignal>
#include <iostream>
#include <sstream>

#include "frugal/frugal.hpp"

namespace {

struct Corruption {
  int64_t first = 0, last = 0;
  std::string kind;  // nan or spike
};

std::vector<Corruption> parse_corruptions(const std::string& text) {
  std::vector<Corruption> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t dash = item.find('-'), colon = item.find(':');
    if (dash == std::string::npos || colon == std::string::npos || colon < dash) {
      throw frugal::OptionError("corrupt", "probe.corrupt: '" + item + "' is not FIRST-LAST:nan|spike");
    }
    Corruption c{std::stoll(item.substr(0, dash)), std::stoll(item.substr(dash + 1, colon - dash - 1)), item.substr(colon + 1)};
    if (c.kind != "nan" && c.kind != "spike") throw frugal::OptionError("corrupt", "probe.corrupt: kind must be nan or spike, got " + c.kind);
    out.push_back(c);
  }
  return out;
}

struct NetImpl : torch::nn::Cloneable<NetImpl> {
  NetImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

// Ends the process like a lost node (SIGKILL) at the first step after the `rollbacks`-th
// rollback, which the checkpoint policy (the Trainer's resume source) has saved by then.
struct KillAfterRollback : frugal::Policy {
  KillAfterRollback(int64_t rollbacks, std::shared_ptr<frugal::RecoveryPolicy> recovery) : rollbacks_(rollbacks), recovery_(std::move(recovery)) {}
  std::string name() const override { return "kill_after_rollback"; }
  void on_step_begin(frugal::StepContext&) override {
    if (recovery_->rollbacks() >= rollbacks_) std::raise(SIGKILL);
  }
  int64_t rollbacks_;
  std::shared_ptr<frugal::RecoveryPolicy> recovery_;
};

int run(int argc, char** argv) {
  frugal::StandardOptions options;
  options.trainer.max_epochs(2).run_dir("").log_every_n_steps(10).device("cpu");
  options.data.batch_size(16).shuffle(false);
  options.progress_enabled = false;
  std::string corrupt;
  int64_t kill_after = 0, examples = 2048;
  double lr = 0.05;
  frugal::Config config;
  frugal::bind(config, options);
  config.bind("probe.corrupt", corrupt, "FIRST-LAST:nan|spike,... example ranges to corrupt");
  config.bind("probe.kill_after_rollback", kill_after, "SIGKILL once this rollback's checkpoint is written; 0 = never");
  config.bind("probe.examples", examples, "Training examples");
  config.bind("probe.lr", lr, "SGD learning rate");
  const frugal::ProgramStart start = frugal::start_program(argc, argv, config, options, "recovery probe");
  if (start.cli.exit_code) {
    std::cout << start.cli.message;
    return *start.cli.exit_code;
  }
  const std::vector<Corruption> corruptions = parse_corruptions(corrupt);

  torch::manual_seed(0);
  // Four overlapping Gaussian blobs in 8 dimensions: learnable, with a loss that settles well
  // above 0 (as real training losses do), so a clean run's batch-to-batch noise is no spike.
  const torch::Tensor centers = torch::randn({4, 8}) * 0.7;
  auto make = [&](int64_t n) {
    torch::Tensor y = torch::randint(0, 4, {n}, torch::kLong);
    torch::Tensor x = centers.index_select(0, y) + torch::randn({n, 8});
    return std::make_pair(x, y);
  };
  auto [x, y] = make(examples);
  auto [vx, vy] = make(512);
  for (const auto& c : corruptions) {
    auto rows = x.slice(0, c.first, c.last + 1);
    if (c.kind == "nan") rows.fill_(std::nan(""));
    if (c.kind == "spike") {  // confidently wrong: large inputs, labels moved by one
      rows.mul_(100.0);
      auto labels = y.slice(0, c.first, c.last + 1);
      labels.copy_((labels + 1).remainder(4));
    }
  }
  auto train = std::make_shared<frugal::TensorDataset>(x, y);
  auto validation = std::make_shared<frugal::TensorDataset>(vx, vy);
  Net net;
  frugal::Model model(net.ptr(),
                      frugal::LossFn<NetImpl>([](NetImpl& n, const frugal::Batch& b) { return torch::cross_entropy_loss(n.forward(b.input), b.target); }),
                      frugal::MetricsFn<NetImpl>([](NetImpl& n, const frugal::Batch& b) {
                        return frugal::BatchMetrics{{"loss", torch::cross_entropy_loss(n.forward(b.input), b.target)}};
                      }));
  frugal::Trainer trainer(model, [lr](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  }, train, options.trainer, options.data);
  trainer.set_validation_data(validation);
  frugal::add_policies(trainer, options, config.to_toml());
  if (kill_after > 0) {
    std::shared_ptr<frugal::RecoveryPolicy> recovery;
    for (const auto& p : trainer.policies()) {
      if (auto r = std::dynamic_pointer_cast<frugal::RecoveryPolicy>(p)) recovery = r;
    }
    if (!recovery) throw frugal::OptionError("kill_after_rollback", "probe.kill_after_rollback needs recovery.enabled=true");
    trainer.add_policy(std::make_shared<KillAfterRollback>(kill_after, recovery));
  }
  const frugal::FitResult result = trainer.fit();
  double checksum = 0.0;
  for (const auto& p : net->parameters()) checksum += p.sum().item<double>();
  std::cout.precision(17);
  std::cout << "final: rank " << trainer.rank() << " step " << result.state.step << " loss " << result.train_loss << " validation_loss "
            << result.state.last_validation.at("loss") << " checksum " << checksum << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::exit_process(frugal::run_program("recovery_probe", [&] { return run(argc, argv); }));
}
