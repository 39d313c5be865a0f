// Frugal's ResNet example: ResNet-50 v1.5 (or a smaller variant) trained on JPEG images the way
// NVIDIA's and torchvision's reference recipes do: RandomResizedCrop + flip decoded by worker
// threads, uint8 batches normalised on the device, channels-last, SGD with momentum (Nesterov
// optional) and no weight decay on BatchNorm and biases, label smoothing, linear warm-up then
// cosine decay, top-1/top-5 validation. Every Frugal policy is a config key or flag.
//
//   bash examples/resnet50/prepare_digits.sh data/digits      # the bundled default's data
//   build/examples/resnet50/frugal_resnet50 --config examples/resnet50/digits.toml
//   build/examples/resnet50/frugal_resnet50 --images.source=folder --images.train=/data/imagenet/train
//       --images.val=/data/imagenet/val --precision.mode=bf16 --data.batch_size=256 --data.num_workers=16
//   build/examples/resnet50/frugal_resnet50 --images.source=synthetic --trainer.max_steps=200   # throughput
//   torchrun --nproc-per-node=8 --no-python build/examples/resnet50/frugal_resnet50 --config ...

#include <torch/torch.h>

#include <iostream>
#include <sstream>

#include "frugal/frugal.hpp"
#include "image_data.hpp"

namespace {

struct ModelOptions {
  std::string variant = "resnet50";
  int64_t base_channels = 64;
  std::string stage_depths;  // "a,b,c,d" blocks per stage; "" = the variant's (an architecture search's key)
  bool zero_init_residual = true;
  std::string channels_last = "auto";  // auto (on CUDA) | true | false
  std::string weights;                 // safetensors to start from ("" = random init)
  std::string export_path;             // write the final weights here as safetensors
  int64_t seed = 0;
  std::string activation_checkpointing = "off";  // off | full | every:K | stage
  bool activation_offload = false;
};

struct OptimizerOptions {
  double lr = 0.256;        // NVIDIA's recipe for batch 256 (0.1 in torchvision's)
  double momentum = 0.875;
  bool nesterov = false;
  double weight_decay = 3.0517578125e-05;
  bool decay_norm_and_bias = false;  // false: no weight decay on BatchNorm parameters and biases
  double label_smoothing = 0.1;
  double warmup_epochs = 5;
  int64_t schedule_epochs = 0;  // length of the LR schedule; 0 = trainer.max_epochs
  double min_lr_factor = 0.0;
};

// Top-k accuracy of logits against labels, as a scalar tensor.
torch::Tensor top_k(const torch::Tensor& logits, const torch::Tensor& target, int64_t k) {
  const torch::Tensor best = std::get<1>(logits.topk(std::min<int64_t>(k, logits.size(1)), 1));
  return best.eq(target.unsqueeze(1)).any(1).to(torch::kFloat32).mean();
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(torch::nn::Module& module, const OptimizerOptions& o,
                                                  const frugal::StateQuantization& states) {
  const auto options = torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(o.weight_decay);
  const bool all = o.decay_norm_and_bias;
  return std::make_unique<frugal::QuantizedSGD>(
      frugal::weight_decay_groups(module, options, [all](const std::string& name, const torch::Tensor& p) {
        return !all && frugal::is_bias_or_norm(name, p);
      }),
      options, states);
}

// "3,4,6,3": blocks in each of the 4 stages.
std::vector<int64_t> stage_depths(const std::string& text) {
  std::vector<int64_t> depths;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    size_t used = 0;
    int64_t depth = 0;
    try {
      depth = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || part.empty() || depth < 1 || depth > 64) {
      throw frugal::OptionError("stage_depths", "stage_depths must be 4 block counts of 1 to 64 as \"3,4,6,3\", got '" + text + "'");
    }
    depths.push_back(depth);
  }
  if (depths.size() != 4) throw frugal::OptionError("stage_depths", "stage_depths must be 4 block counts as \"3,4,6,3\", got '" + text + "'");
  return depths;
}

void bind_example(frugal::Config& config, ModelOptions& m, OptimizerOptions& o, resnet_example::ImageDataOptions& d) {
  config.bind("model.variant", m.variant, "resnet18, resnet26, resnet34, resnet50, resnet101 or resnet152",
              {"resnet18", "resnet26", "resnet34", "resnet50", "resnet101", "resnet152"});
  config.bind("model.base_channels", m.base_channels, "Channels of the stem and first stage (64 = torchvision)");
  config.bind("model.stage_depths", m.stage_depths, "Blocks in each of the 4 stages, as \"3,4,6,3\"; \"\" = the variant's");
  config.bind("model.zero_init_residual", m.zero_init_residual, "Start each block's last BatchNorm gamma at 0");
  config.bind("model.channels_last", m.channels_last, "Channels-last weights and inputs: auto (on CUDA), true, false",
              {"auto", "true", "false"});
  config.bind("model.weights", m.weights, "safetensors weights to start from (torchvision names); \"\" = random");
  config.bind("model.export", m.export_path, "Write the final weights here as safetensors; \"\" = don't");
  config.bind("model.seed", m.seed, "Seed of the initial weights");
  config.bind("model.activation_checkpointing", m.activation_checkpointing,
              "Recompute activations in backward instead of keeping them: off, full (every residual block), every:K "
              "(blocks 0, K, 2K...), stage (each of the four stages as one segment); about one extra forward pass of time");
  config.bind("model.activation_offload", m.activation_offload, "On CUDA: checkpointed segments' inputs wait in pinned host memory");
  config.bind("optimizer.lr", o.lr, "SGD learning rate at the end of warm-up");
  config.bind("optimizer.momentum", o.momentum, "SGD momentum");
  config.bind("optimizer.nesterov", o.nesterov, "Nesterov momentum");
  config.bind("optimizer.weight_decay", o.weight_decay, "L2 weight decay");
  config.bind("optimizer.decay_norm_and_bias", o.decay_norm_and_bias, "Also decay BatchNorm parameters and biases");
  config.bind("optimizer.label_smoothing", o.label_smoothing, "Label smoothing of the cross-entropy loss");
  config.bind("optimizer.warmup_epochs", o.warmup_epochs, "Linear warm-up, in epochs (fractions allowed)");
  config.bind("optimizer.min_lr_factor", o.min_lr_factor, "Cosine decay ends at lr x this");
  config.bind("optimizer.schedule_epochs", o.schedule_epochs,
              "Epochs the LR schedule spans; 0 = trainer.max_epochs (set it to stop a run early on the same schedule)");
  config.bind_enum("images.source", d.source, "shards, folder (ImageFolder layout) or synthetic");
  config.bind("images.train", d.train, "Training shards directory or image folder");
  config.bind("images.val", d.val, "Validation shards directory or image folder; \"\" = no validation");
  config.bind("images.size", d.size, "Training crop side in pixels");
  config.bind("images.val_size", d.val_size, "Validation crop side; 0 = images.size");
  config.bind("images.min_scale", d.min_scale, "RandomResizedCrop's smallest area fraction");
  config.bind("images.center_fraction", d.center_fraction,
              "Validation: Resize(val_size / center_fraction) then CenterCrop(val_size), as torchvision (224 of 256)");
  config.bind("images.dct_scaling", d.dct_scaling, "Training: decode JPEGs at a reduced size when the crop allows it");
  config.bind("images.val_dct_scaling", d.val_dct_scaling,
              "Validation: decode at a reduced size (faster; off = torchvision's pixels exactly)");
  config.bind("images.roi_decode", d.roi_decode,
              "Decode only the rows and MCU columns of the crop (training; validation too with images.val_dct_scaling)");
  config.bind_enum("images.decode", d.decode,
                   "Where JPEGs are decoded: cpu (worker threads, libjpeg-turbo), gpu (nvJPEG on the training GPU; shards only) "
                   "or auto (gpu when training on CUDA and libnvjpeg loads)");
  config.bind("images.flip", d.flip, "Random horizontal flips in training");
  config.bind("images.synthetic_images", d.synthetic_images, "Synthetic source: images per epoch");
  config.bind("images.synthetic_classes", d.synthetic_classes, "Synthetic source: classes");
  config.add_check("optimizer", [&o] {
    if (!(o.lr > 0)) throw frugal::OptionError("lr", c10::str("lr must be > 0, got ", o.lr));
    if (o.momentum < 0 || o.momentum >= 1) throw frugal::OptionError("momentum", c10::str("momentum must be in [0, 1), got ", o.momentum));
    if (o.nesterov && o.momentum == 0) throw frugal::OptionError("nesterov", "nesterov needs momentum > 0");
    if (o.weight_decay < 0) throw frugal::OptionError("weight_decay", c10::str("weight_decay must be >= 0, got ", o.weight_decay));
    if (o.label_smoothing < 0 || o.label_smoothing >= 1) {
      throw frugal::OptionError("label_smoothing", c10::str("label_smoothing must be in [0, 1), got ", o.label_smoothing));
    }
    if (o.schedule_epochs < 0) throw frugal::OptionError("schedule_epochs", c10::str("schedule_epochs must be >= 0, got ", o.schedule_epochs));
    if (o.warmup_epochs < 0) throw frugal::OptionError("warmup_epochs", c10::str("warmup_epochs must be >= 0, got ", o.warmup_epochs));
  });
  config.add_check("model", [&m] {
    if (frugal::ActivationCheckpointing::parse(m.activation_checkpointing, "model.activation_checkpointing").scope == frugal::CheckpointScope::attention) {
      throw frugal::OptionError("model.activation_checkpointing", "model.activation_checkpointing: attention is BERT's; ResNet takes off, full, every:K or stage");
    }
    if (m.base_channels < 1) throw frugal::OptionError("base_channels", c10::str("base_channels must be >= 1, got ", m.base_channels));
    if (!m.stage_depths.empty()) stage_depths(m.stage_depths);  // refused here, naming the key, before any data is read
  });
  config.add_check("images", [&d] {
    if (d.size < 32) throw frugal::OptionError("size", c10::str("size must be >= 32, got ", d.size));
    if (d.synthetic_images < 1) throw frugal::OptionError("synthetic_images", "synthetic_images must be >= 1");
    if (d.synthetic_classes < 2) throw frugal::OptionError("synthetic_classes", "synthetic_classes must be >= 2");
  });
}

int run(int argc, char** argv) {
  frugal::StandardOptions options;
  options.trainer.max_epochs(90).run_dir("runs/resnet50").log_every_n_steps(50);
  options.data.batch_size(256).num_workers(8).drop_last(true);
  ModelOptions m;
  OptimizerOptions o;
  resnet_example::ImageDataOptions d;
  frugal::Config config;
  frugal::bind(config, options);
  bind_example(config, m, o, d);
  const frugal::ProgramStart start = frugal::start_program(argc, argv, config, options, "Frugal ResNet example: ImageNet-style training");
  const frugal::CommandLine& cli = start.cli;
  const frugal::World& world = start.world;
  if (cli.exit_code) {
    std::cout << cli.message;
    return *cli.exit_code;
  }

  torch::Device device = frugal::resolve_device(options.trainer.device());
  if (device.is_cuda() && !device.has_index()) device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank));
  // Fixed input shapes: let cuDNN time its algorithms once and keep the fastest (as the
  // reference scripts' torch.backends.cudnn.benchmark = True).
  if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);
  const resnet_example::ImageData data = resnet_example::open_image_data(d, options.shards, device);
  frugal::preemption::stop_if_requested("opening the image data");
  torch::manual_seed(static_cast<uint64_t>(m.seed));
  auto architecture = frugal::ResNetOptions::variant(m.variant);
  if (!m.stage_depths.empty()) architecture.layers(stage_depths(m.stage_depths));
  frugal::ResNet net(architecture
                         .base_channels(m.base_channels)
                         .num_classes(data.classes)
                         .zero_init_residual(m.zero_init_residual));
  if (!m.weights.empty()) {
    frugal::load_safetensors(*net, m.weights);
    frugal::log::info(c10::str("loaded weights from ", m.weights));
  }
  const bool channels_last = m.channels_last == "true" || (m.channels_last == "auto" && device.is_cuda());
  const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  if (channels_last) frugal::to_memory_format(*net, format);
  frugal::ActivationCheckpointing recompute = frugal::ActivationCheckpointing::parse(m.activation_checkpointing, "model.activation_checkpointing");
  recompute.offload = m.activation_offload;
  net->set_activation_checkpointing(recompute);
  if (recompute.enabled()) {
    frugal::log::info("activation checkpointing: " + recompute.to_string() + (recompute.offload ? ", inputs offloaded to host memory" : ""));
  }

  const double smoothing = o.label_smoothing;
  frugal::Model model(
      net.ptr(),
      frugal::LossFn<frugal::ResNetImpl>([format, smoothing](frugal::ResNetImpl& n, const frugal::Batch& b) {
        return torch::nn::functional::cross_entropy(n.forward(frugal::normalize_images(b.input, format)), b.target,
                                                    torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(smoothing));
      }),
      frugal::MetricsFn<frugal::ResNetImpl>([format](frugal::ResNetImpl& n, const frugal::Batch& b) {
        const torch::Tensor logits = n.forward(frugal::normalize_images(b.input, format)).to(torch::kFloat32);
        return frugal::BatchMetrics{{"loss", torch::nn::functional::cross_entropy(logits, b.target)},
                                    {"top1", top_k(logits, b.target, 1)},
                                    {"top5", top_k(logits, b.target, 5)}};
      }));
  frugal::preemption::stop_if_requested("loading the model");
  frugal::Trainer trainer(model, [o, states = options.optimizer_states](torch::nn::Module& module) { return make_sgd(module, o, states); }, data.train,
                          options.trainer, options.data);
  if (data.val) trainer.set_validation_data(data.val);
  auto schedule = [&] {
    const int64_t per_epoch = frugal::optimizer_steps_per_epoch(trainer, options);
    const int64_t total = o.schedule_epochs > 0           ? o.schedule_epochs * per_epoch
                          : options.trainer.max_steps() > 0 ? options.trainer.max_steps()
                                                            : options.trainer.max_epochs() * per_epoch;
    const auto warmup = std::min<int64_t>(static_cast<int64_t>(o.warmup_epochs * static_cast<double>(per_epoch)), total - 1);
    trainer.set_lr_schedule(frugal::lr::cosine(warmup, std::max<int64_t>(total, 1), o.min_lr_factor));
  };
  if (cli.smoke_test_only) {
    schedule();
    return frugal::run_smoke_test_only(trainer, options.smoke_test);
  }
  // MFU: a training step costs three forward passes; every crop has the training size, so any
  // image is a worst-case probe for the automatic batch size.
  options.throughput.flops_per_sample(3 * net->forward_flops(d.size, d.size));
  frugal::add_policies(trainer, options, config.to_toml(),  // connects to the other ranks, if any
                       frugal::repeat_example(data.train, 0, c10::str(d.size, "px ", channels_last ? "channels_last" : "contiguous")));
  schedule();
  const frugal::FitResult result = trainer.fit();
  if (trainer.rank() != 0) return 0;
  if (!m.export_path.empty()) {
    frugal::save_safetensors(*net, m.export_path);
    frugal::log::info(c10::str("exported the weights to ", m.export_path));
  }
  std::cout << "resnet: " << m.variant << " (base " << m.base_channels << (m.stage_depths.empty() ? "" : ", stages " + m.stage_depths)
            << ", " << data.classes << " classes"
            << (channels_last ? ", channels_last" : "") << ") on " << device << ", "
            << (trainer.world_size() > 1 ? c10::str(trainer.world_size(), " processes, ") : "") << result.state.step
            << " steps in " << result.seconds << " s (" << static_cast<int64_t>(result.samples_per_second)
            << " img/s), final train loss " << result.train_loss;
  for (const auto& [name, value] : result.state.last_validation) std::cout << ", validation " << name << " " << value;
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::exit_process(frugal::run_program("frugal_resnet50", [&] { return run(argc, argv); }));
}
