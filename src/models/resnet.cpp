#include "frugal/models/resnet.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <map>

#include "frugal/errors.hpp"

namespace frugal {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Output side of a convolution or pooling window.
int64_t out_side(int64_t side, int64_t kernel, int64_t stride, int64_t padding) { return (side + 2 * padding - kernel) / stride + 1; }

// 2 x MACs of `c` on a `side_h` x `side_w` input; updates the sides to the output's.
double conv_flops(const torch::nn::Conv2dImpl& c, int64_t& side_h, int64_t& side_w) {
  const auto& o = c.options;
  side_h = out_side(side_h, (*o.kernel_size())[0], (*o.stride())[0], (*std::get<torch::ExpandingArray<2>>(o.padding()))[0]);
  side_w = out_side(side_w, (*o.kernel_size())[1], (*o.stride())[1], (*std::get<torch::ExpandingArray<2>>(o.padding()))[1]);
  return 2.0 * static_cast<double>(side_h * side_w) * static_cast<double>(o.in_channels() * o.out_channels()) *
         static_cast<double>((*o.kernel_size())[0] * (*o.kernel_size())[1]);
}

}  // namespace

ResNetOptions ResNetOptions::variant(const std::string& name) {
  using enum ResNetBlock;
  static const std::map<std::string, std::pair<ResNetBlock, std::vector<int64_t>>> variants{
      {"resnet18", {basic, {2, 2, 2, 2}}},       {"resnet26", {bottleneck, {2, 2, 2, 2}}},
      {"resnet34", {basic, {3, 4, 6, 3}}},       {"resnet50", {bottleneck, {3, 4, 6, 3}}},
      {"resnet101", {bottleneck, {3, 4, 23, 3}}}, {"resnet152", {bottleneck, {3, 8, 36, 3}}}};
  const auto it = variants.find(name);
  if (it == variants.end()) {
    throw OptionError("variant", c10::str("unknown ResNet variant '", name,
                                          "' (resnet18, resnet26, resnet34, resnet50, resnet101, resnet152)"));
  }
  return ResNetOptions().block(it->second.first).layers(it->second.second);
}

void ResNetOptions::validate() const {
  if (layers().size() != 4) throw OptionError("layers", c10::str("layers must list 4 stages, got ", layers().size()));
  for (const int64_t n : layers()) {
    if (n < 1) throw OptionError("layers", c10::str("every stage needs >= 1 block, got ", c10::IntArrayRef(layers())));
  }
  if (base_channels() < 1) throw OptionError("base_channels", c10::str("base_channels must be >= 1, got ", base_channels()));
  if (num_classes() < 1) throw OptionError("num_classes", c10::str("num_classes must be >= 1, got ", num_classes()));
}

ResidualBlockImpl::ResidualBlockImpl(bool bottleneck, int64_t in_channels, int64_t planes, int64_t stride)
    : bottleneck_(bottleneck), in_channels_(in_channels), planes_(planes), stride_(stride) {
  reset();
}

void ResidualBlockImpl::reset() {
  const int64_t out_channels = planes_ * (bottleneck_ ? 4 : 1);
  if (bottleneck_) {
    conv1 = register_module("conv1", conv(in_channels_, planes_, 1, 1));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes_));
    conv2 = register_module("conv2", conv(planes_, planes_, 3, stride_));  // v1.5: the stride is here
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes_));
    conv3 = register_module("conv3", conv(planes_, out_channels, 1, 1));
    bn3 = register_module("bn3", torch::nn::BatchNorm2d(out_channels));
  } else {
    conv1 = register_module("conv1", conv(in_channels_, planes_, 3, stride_));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes_));
    conv2 = register_module("conv2", conv(planes_, planes_, 3, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes_));
  }
  if (stride_ != 1 || in_channels_ != out_channels) {
    downsample = register_module("downsample", torch::nn::Sequential(conv(in_channels_, out_channels, 1, stride_),
                                                                     torch::nn::BatchNorm2d(out_channels)));
  }
}

torch::Tensor ResidualBlockImpl::forward(const torch::Tensor& x) {
  // In place where torchvision is (ReLU after BatchNorm, the residual sum): BatchNorm's backward
  // needs its input, not its output, so overwriting the output saves memory traffic and memory.
  torch::Tensor y = bn1(conv1(x)).relu_();
  if (bottleneck_) {
    y = bn2(conv2(y)).relu_();
    y = bn3(conv3(y));
  } else {
    y = bn2(conv2(y));
  }
  y.add_(downsample ? downsample->forward(x) : x);
  return torch::relu_(y);
}

ResNetImpl::ResNetImpl(ResNetOptions options) : options_(std::move(options)) {
  options_.validate();
  reset();
}

void ResNetImpl::reset() {
  const int64_t base = options_.base_channels();
  conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, base, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(base));
  int64_t in_channels = base;
  auto stage = [&](const char* name, int64_t planes, int64_t blocks, int64_t stride) {
    torch::nn::Sequential seq;
    for (int64_t i = 0; i < blocks; ++i) {
      seq->push_back(ResidualBlock(options_.bottleneck(), in_channels, planes, i == 0 ? stride : 1));
      in_channels = planes * (options_.bottleneck() ? 4 : 1);
    }
    return register_module(name, seq);
  };
  layer1 = stage("layer1", base, options_.layers()[0], 1);
  layer2 = stage("layer2", base * 2, options_.layers()[1], 2);
  layer3 = stage("layer3", base * 4, options_.layers()[2], 2);
  layer4 = stage("layer4", base * 8, options_.layers()[3], 2);
  fc = register_module("fc", torch::nn::Linear(in_channels, options_.num_classes()));

  // torchvision's initialisation: He normal (fan_out) convolutions, BatchNorm gamma 1 and beta 0,
  // the Linear layer's default.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    }
  }
  if (options_.zero_init_residual()) {
    for (auto* layer : {&layer1, &layer2, &layer3, &layer4}) {
      for (auto& block : **layer) block.get<ResidualBlockImpl>().last_norm()->weight.zero_();
    }
  }
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = bn1(conv1(x)).relu_();
  y = torch::max_pool2d(y, 3, 2, 1);
  y = stages(std::move(y));
  y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
  return fc(y);
}

void ResNetImpl::set_activation_checkpointing(const ActivationCheckpointing& plan) {
  if (plan.scope == CheckpointScope::attention) {
    throw OptionError("activation_checkpointing", "ResNet takes activation checkpointing off, full, every:K or stage; attention is BERT's");
  }
  checkpointing_ = plan;
}

torch::Tensor ResNetImpl::stages(torch::Tensor y) {
  if (!checkpointing_.enabled()) return layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
  const ActivationCheckpointOptions options = checkpointing_.options();
  // The last segment is never recomputed: its backward comes right after its forward, so keeping
  // its activations holds no more memory than recomputing them would (as torch's checkpoint_sequential).
  int64_t block_index = 0;  // across the stages, for every:K
  const int64_t blocks = static_cast<int64_t>(layer1->size() + layer2->size() + layer3->size() + layer4->size());
  for (torch::nn::Sequential stage : {layer1, layer2, layer3, layer4}) {
    if (checkpointing_.scope == CheckpointScope::stage) {
      y = stage.ptr() == layer4.ptr() ? stage->forward(y)
                                      : activation_checkpoint(*stage, [stage](const torch::Tensor& x) mutable { return stage->forward(x); }, y, options);
      continue;
    }
    for (size_t i = 0; i < stage->size(); ++i) {
      auto block = stage->ptr<ResidualBlockImpl>(i);
      const int64_t index = block_index++;
      if (checkpointing_.covers_layer(index) && index + 1 < blocks) {
        y = activation_checkpoint(*block, [block](const torch::Tensor& x) { return block->forward(x); }, y, options);
      } else {
        y = block->forward(y);
      }
    }
  }
  return y;
}

double ResNetImpl::forward_flops(int64_t height, int64_t width) const {
  int64_t h = height, w = width;
  double flops = conv_flops(*conv1, h, w);
  h = out_side(h, 3, 2, 1);
  w = out_side(w, 3, 2, 1);
  for (const auto* layer : {&layer1, &layer2, &layer3, &layer4}) {
    for (const auto& item : **layer) {
      const auto& block = item.get<ResidualBlockImpl>();
      int64_t bh = h, bw = w;
      if (block.downsample) {
        int64_t dh = h, dw = w;
        flops += conv_flops(block.downsample->at<torch::nn::Conv2dImpl>(0), dh, dw);
      }
      for (const auto* c : {&block.conv1, &block.conv2, &block.conv3}) {
        if (*c) flops += conv_flops(**c, bh, bw);
      }
      h = bh;
      w = bw;
    }
  }
  return flops + 2.0 * static_cast<double>(fc->options.in_features() * fc->options.out_features());
}

void to_memory_format(torch::nn::Module& module, c10::MemoryFormat format) {
  torch::NoGradGuard no_grad;
  auto convert = [format](torch::Tensor& t) {
    if (!t.defined() || t.dim() != 4) return;
    t.set_data(t.data().contiguous(format));
    if (t.grad().defined()) t.mutable_grad() = t.grad().contiguous(format);
  };
  for (auto& p : module.parameters(/*recurse=*/true)) convert(p);
  for (auto& b : module.buffers(/*recurse=*/true)) convert(b);
}

}  // namespace frugal
