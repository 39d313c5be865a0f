#include <catch2/catch.hpp>

#include "frugal/io/safetensors.hpp"
#include "frugal/models/resnet.hpp"
#include "support/fixtures.hpp"
#include "support/python_reference.hpp"

using namespace frugal;
using namespace frugal::testing;
namespace fs = std::filesystem;

namespace {

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

struct Reference {
  fs::path dir;
  std::vector<std::string> grads;
  std::map<std::string, torch::Tensor> tensors;
};

Reference make_reference(const std::string& variant) {
  Reference ref{scratch_dir("resnet_parity_" + variant), {}, {}};
  const auto json = run_python_reference("torchvision_resnet.py", "make " + ref.dir.string() + " " + variant);
  ref.grads = json["grads"].get<std::vector<std::string>>();
  ref.tensors = read_safetensors(ref.dir / "reference.safetensors");
  return ref;
}

ResNet load_frugal(const Reference& ref, const std::string& variant) {
  ResNet net(ResNetOptions::variant(variant).num_classes(10));
  const LoadReport report = load_safetensors(*net, ref.dir / "model.safetensors");  // strict: every name matches
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  return net;
}

void check_parity(const std::string& variant) {
  Seeded seeded;
  const Reference ref = make_reference(variant);
  ResNet net = load_frugal(ref, variant);
  const torch::Tensor& x = ref.tensors.at("input");

  net->eval();
  {
    torch::NoGradGuard no_grad;
    CHECK(relative_difference(net->forward(x), ref.tensors.at("eval_logits")) < 1e-5);
    // channels_last computes the same logits.
    ResNet cl = load_frugal(ref, variant);
    to_memory_format(*cl, torch::MemoryFormat::ChannelsLast);
    CHECK(cl->conv1->weight.is_contiguous(torch::MemoryFormat::ChannelsLast));
    cl->eval();
    CHECK(relative_difference(cl->forward(x.contiguous(torch::MemoryFormat::ChannelsLast)), ref.tensors.at("eval_logits")) < 1e-5);
  }

  // Train mode in float64 (see tests/reference/torchvision_resnet.py for why).
  net->to(torch::kFloat64);
  net->train();
  const torch::Tensor loss = torch::nn::functional::cross_entropy(
      net->forward(x.to(torch::kFloat64)), ref.tensors.at("target"), torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(0.1));
  loss.backward();
  CHECK(relative_difference(loss.reshape({1}), ref.tensors.at("train_loss")) < 1e-10);
  const auto params = net->named_parameters();
  for (const auto& name : ref.grads) {
    INFO(name);
    REQUIRE(params.contains(name));
    CHECK(relative_difference(params[name].grad(), ref.tensors.at("grad." + name)) < 1e-8);
  }
  const auto buffers = net->named_buffers();
  CHECK(relative_difference(buffers["bn1.running_mean"], ref.tensors.at("running_mean.bn1")) < 1e-10);
  CHECK(relative_difference(buffers["layer4.1.bn2.running_var"], ref.tensors.at("running_var.layer4.1.bn2")) < 1e-10);

  // Frugal's export (after a training step changed it) loads in torchvision and computes the same logits.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.sub_(0.01 * p.grad());
  }
  net->to(torch::kFloat32);
  net->eval();
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = net->forward(x);
  }
  save_safetensors(*net, ref.dir / "frugal.safetensors");
  write_safetensors(ref.dir / "frugal_logits.safetensors", {{"input", x}, {"logits", logits}});
  const auto check = run_python_reference("torchvision_resnet.py", "check " + ref.dir.string() + " " + variant);
  CHECK(check["max_relative_difference"].get<double>() < 1e-5);
}

}  // namespace

TEST_CASE("ResNet-50 matches torchvision: names, eval logits, train loss, gradients, BatchNorm statistics, export", "[python]") {
  check_parity("resnet50");
}

TEST_CASE("ResNet-18 (basic blocks) matches torchvision", "[python]") { check_parity("resnet18"); }

TEST_CASE("ResNet variants: shapes, widths, zero-init residual, FLOPs, bad options", "[resnet]") {
  ResNet r50(ResNetOptions::variant("resnet50"));
  int64_t count = 0;
  for (const auto& p : r50->parameters()) count += p.numel();
  CHECK(count == 25'557'032);  // torchvision resnet50's parameter count
  // 4.1 GMACs at 224x224, the figure torchvision documents for ResNet-50.
  CHECK(r50->forward_flops(224, 224) / 2 == Approx(4.11e9).epsilon(0.01));
  ResNet r18(ResNetOptions::variant("resnet18"));
  CHECK(r18->forward_flops(224, 224) / 2 == Approx(1.81e9).epsilon(0.01));

  ResNet narrow(ResNetOptions::variant("resnet26").base_channels(8).num_classes(10).zero_init_residual(true));
  CHECK(narrow->conv1->weight.size(0) == 8);
  CHECK(narrow->fc->weight.sizes() == torch::IntArrayRef({10, 8 * 8 * 4}));
  CHECK(narrow->forward(torch::randn({2, 3, 32, 32})).sizes() == torch::IntArrayRef({2, 10}));
  for (const auto& item : narrow->named_parameters()) {
    const double magnitude = item.value().abs().sum().item<double>();
    if (item.key().find("bn3.weight") != std::string::npos) CHECK(magnitude == 0.0);
    if (item.key() == "layer1.0.bn1.weight") CHECK(magnitude > 0.0);
  }
  ResNet plain(ResNetOptions::variant("resnet26").base_channels(8).num_classes(10));
  CHECK(plain->named_parameters()["layer1.0.bn3.weight"].abs().sum().item<double>() > 0.0);

  CHECK_THROWS_WITH(ResNetOptions::variant("resnet51"), Catch::Contains("unknown ResNet variant 'resnet51'"));
  CHECK_THROWS_AS(ResNet(ResNetOptions().layers({1, 1, 1})), OptionError);
  CHECK_THROWS_WITH(parse_enum_option<ResNetBlock>("wide", "block"), "block must be one of bottleneck, basic; got 'wide'");
  // Clones (the smoke test's CPU copy) are deep.
  auto copy = std::dynamic_pointer_cast<ResNetImpl>(narrow->clone());
  copy->conv1->weight.data().fill_(1.0);
  CHECK(narrow->conv1->weight.ne(1.0).any().item<bool>());
}
