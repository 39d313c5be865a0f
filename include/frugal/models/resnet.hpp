#pragma once
// ResNet v1.5 (the stride-2 convolution of a downsampling bottleneck is the 3x3 one, as in
// torchvision and NVIDIA's reference) with torchvision's parameter and buffer names, so
// torchvision weights exported to safetensors load directly and Frugal's load in torchvision:
// "conv1.weight", "layer1.0.conv1.weight", "layer1.0.downsample.0.weight", "fc.bias"...
// Variants change depth (block kind and count per stage) and width (channels of the stem and
// of the first stage, doubled at each stage); at base_channels 64 they are torchvision's models.
//
//   frugal::ResNet net(frugal::ResNetOptions::variant("resnet50").num_classes(1000));
//   frugal::to_memory_format(*net, torch::MemoryFormat::ChannelsLast);
//   torch::Tensor logits = net->forward(images);  // float [N, 3, H, W], normalised

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <string>
#include <vector>

#include "frugal/base/enum_names.hpp"
#include "frugal/memory/checkpoint_plan.hpp"

namespace frugal {

/// A residual block: bottleneck (1x1, 3x3, 1x1, 4x expansion: ResNet-50/101/152) or basic (two
/// 3x3: ResNet-18/34).
enum class ResNetBlock { bottleneck, basic };
constexpr std::array<EnumName<ResNetBlock>, 2> names_of(ResNetBlock) {
  return {{{ResNetBlock::bottleneck, "bottleneck"}, {ResNetBlock::basic, "basic"}}};
}

struct ResNetOptions {
  TORCH_ARG(ResNetBlock, block) = ResNetBlock::bottleneck;
  /// Blocks in each of the four stages.
  TORCH_ARG(std::vector<int64_t>, layers) = std::vector<int64_t>({3, 4, 6, 3});
  /// Channels of the stem and the first stage (64 in torchvision); 16 makes a model ~16x cheaper.
  TORCH_ARG(int64_t, base_channels) = 64;
  TORCH_ARG(int64_t, num_classes) = 1000;
  /// Start the last BatchNorm of each residual branch at gamma = 0, so every block begins as the
  /// identity (Goyal et al.; torchvision's zero_init_residual): helps large-batch training.
  TORCH_ARG(bool, zero_init_residual) = false;

 public:
  /// resnet18, resnet26, resnet34, resnet50, resnet101, resnet152; OptionError naming the others.
  static ResNetOptions variant(const std::string& name);
  /// Throws OptionError naming the bad field and value.
  void validate() const;
  bool bottleneck() const { return block() == ResNetBlock::bottleneck; }
  /// Channels entering the classifier: 8 * base_channels, times 4 for bottleneck blocks.
  int64_t feature_channels() const { return base_channels() * 8 * (bottleneck() ? 4 : 1); }
};

/// One residual block: conv1/bn1, conv2/bn2 (3x3, carries the stride), and for bottlenecks
/// conv3/bn3; a "downsample" 1x1 conv + BN on the shortcut when the shape changes.
class ResidualBlockImpl : public torch::nn::Cloneable<ResidualBlockImpl> {
 public:
  ResidualBlockImpl(bool bottleneck, int64_t in_channels, int64_t planes, int64_t stride);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  /// The BatchNorm whose gamma zero_init_residual zeroes.
  torch::nn::BatchNorm2d& last_norm() { return bottleneck_ ? bn3 : bn2; }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};

 private:
  bool bottleneck_;
  int64_t in_channels_, planes_, stride_;
};
TORCH_MODULE(ResidualBlock);

class ResNetImpl : public torch::nn::Cloneable<ResNetImpl> {
 public:
  explicit ResNetImpl(ResNetOptions options = {});
  void reset() override;
  /// Logits [N, num_classes] of float images [N, 3, H, W] (any memory format, H and W >= 32).
  torch::Tensor forward(const torch::Tensor& x);
  const ResNetOptions& options() const { return options_; }
  /// Multiply-accumulates x 2 of one forward pass on a `height` x `width` image.
  double forward_flops(int64_t height, int64_t width) const;
  /// Residual blocks (full, every:K, counted across the stages) or whole stages (stage)
  /// recomputed in backward; OptionError for scopes that are not ResNet's (attention).
  void set_activation_checkpointing(const ActivationCheckpointing& plan);
  const ActivationCheckpointing& activation_checkpointing() const { return checkpointing_; }

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  torch::Tensor stages(torch::Tensor y);
  ResNetOptions options_;
  ActivationCheckpointing checkpointing_;
};
TORCH_MODULE(ResNet);

/// Converts every 4-D parameter, gradient and buffer of `module` to `format` in place (the C++
/// Module::to has no memory-format overload). Channels-last lets cuDNN use its NHWC tensor-core
/// kernels without transposes.
void to_memory_format(torch::nn::Module& module, c10::MemoryFormat format);

}  // namespace frugal
