// Frugal's minimal example: an MLP learns to tell interleaved spirals apart, trained by the
// Trainer with every option settable from examples/minimal/config.toml, FRUGAL_* environment
// variables and --section.key=value flags.
//
//   build/examples/minimal/frugal_minimal --config examples/minimal/config.toml
//   build/examples/minimal/frugal_minimal --smoke-test            # only the CPU smoke test
//   build/examples/minimal/frugal_minimal --help                  # every key and its default
//   torchrun --standalone --nproc-per-node=4 --no-python build/examples/minimal/frugal_minimal
//                                                                 # data-parallel on 4 processes
//   build/examples/minimal/frugal_minimal --model.shard_cache=cache --data.num_workers=2
//                                                                 # stream the data from tar shards

#include <torch/torch.h>

#include <iostream>

#include "frugal/frugal.hpp"
#include "arrays.hpp"
#include "spiral.hpp"

namespace {

struct ModelOptions {
  int64_t hidden = 64;
  int64_t layers = 3;
  double lr = 3e-3;
  double weight_decay = 1e-4;
  int64_t train_examples = 8192;
  int64_t validation_examples = 2048;
  int64_t classes = 3;
  double noise = 0.03;
  int64_t seed = 0;
  std::string shard_cache;  // "" = train from memory
  std::string data_dir;     // NPY arrays of your own (arrays.hpp); "" = the spirals
};

// The spirals as tar shards in a preprocessing cache keyed by how they were generated: the first
// run writes them, later runs reuse them, a change of size, noise or seed writes new ones.
std::pair<std::shared_ptr<const frugal::Dataset>, std::shared_ptr<const frugal::Dataset>> sharded_spirals(
    const ModelOptions& m, const frugal::ShardedDatasetOptions& shard_options) {
  frugal::PreprocessCache cache(m.shard_cache);
  const frugal::CacheKey key{"minimal_spirals", 1,
                             c10::str("train=", m.train_examples, " validation=", m.validation_examples,
                                      " classes=", m.classes, " noise=", m.noise, " seed=", m.seed),
                             "generated"};
  const auto entry = cache.get_or_build(key, [&](const std::filesystem::path& dir) {
    auto write = [&](const std::string& split, int64_t n, uint64_t seed) {
      auto data = minimal::make_spirals(n, m.classes, m.noise, seed);
      frugal::ShardWriter writer(dir / split, frugal::ShardWriterOptions().target_bytes(int64_t{16} << 20));
      for (int64_t i = 0; i < n; ++i) {
        const frugal::Batch b = data->get_batch({i});
        writer.write({c10::str(split, "_", i), {{"npy", frugal::encode_npy(b.input[0])}, {"cls", std::to_string(b.target[0].item<int64_t>())}}});
      }
      writer.finish();
    };
    write("train", m.train_examples, static_cast<uint64_t>(m.seed) + 1);
    write("validation", m.validation_examples, static_cast<uint64_t>(m.seed) + 2);
  });
  auto decode = [](const frugal::Sample& s, const frugal::SampleContext&) {
    return frugal::Batch{frugal::decode_npy(s.field("npy"), s.key + ".npy"), torch::tensor(static_cast<int64_t>(std::stoll(s.field("cls")))), {}};
  };
  return {std::make_shared<frugal::ShardedDataset>(entry.dir / "train", decode, shard_options),
          std::make_shared<frugal::ShardedDataset>(entry.dir / "validation", decode, shard_options)};
}

struct MlpImpl : torch::nn::Cloneable<MlpImpl> {
  MlpImpl(int64_t inputs, int64_t hidden, int64_t layers, int64_t classes)
      : inputs_(inputs), hidden_(hidden), layers_(layers), classes_(classes) {
    reset();
  }
  void reset() override {
    net = torch::nn::Sequential();
    int64_t in = inputs_;
    for (int64_t i = 0; i < layers_; ++i) {
      net->push_back(torch::nn::Linear(in, hidden_));
      net->push_back(torch::nn::ReLU());
      in = hidden_;
    }
    net->push_back(torch::nn::Linear(in, classes_));
    register_module("net", net);
  }
  torch::Tensor forward(const torch::Tensor& x) { return net->forward(x); }
  int64_t inputs_, hidden_, layers_, classes_;
  torch::nn::Sequential net{nullptr};
};
TORCH_MODULE(Mlp);

int run(int argc, char** argv) {
  frugal::StandardOptions options;
  options.trainer.max_epochs(8).run_dir("runs/minimal").log_every_n_steps(50);
  options.data.batch_size(64);
  ModelOptions m;
  frugal::Config config;
  frugal::bind(config, options);
  config.bind("model.hidden", m.hidden, "Hidden width of the MLP");
  config.bind("model.layers", m.layers, "Hidden layers");
  config.bind("model.lr", m.lr, "AdamW learning rate");
  config.bind("model.weight_decay", m.weight_decay, "AdamW weight decay");
  config.bind("model.train_examples", m.train_examples, "Spiral points to train on");
  config.bind("model.validation_examples", m.validation_examples, "Spiral points to validate on");
  config.bind("model.classes", m.classes, "Number of spirals");
  config.bind("model.noise", m.noise, "Gaussian noise on the points");
  config.bind("model.seed", m.seed, "Seed of the data and the initial weights");
  config.bind("model.data_dir", m.data_dir,
              "Train on NPY arrays of your own (train_x/y.npy, validation_x/y.npy; make_digits.py writes scikit-learn's digits); "
              "\"\" = the spirals");
  config.bind("model.shard_cache", m.shard_cache,
              "Write the spirals as tar shards into this preprocessing cache and stream them; \"\" = in memory");
  config.add_check("model", [&m] {
    if (m.hidden < 1) throw frugal::OptionError("hidden", "hidden must be >= 1, got " + std::to_string(m.hidden));
    if (m.layers < 1) throw frugal::OptionError("layers", "layers must be >= 1, got " + std::to_string(m.layers));
    if (m.classes < 2) throw frugal::OptionError("classes", "classes must be >= 2, got " + std::to_string(m.classes));
    if (m.train_examples < 1) throw frugal::OptionError("train_examples", "train_examples must be >= 1");
    if (m.validation_examples < 1) throw frugal::OptionError("validation_examples", "validation_examples must be >= 1");
  });

  const frugal::ProgramStart start = frugal::start_program(argc, argv, config, options, "Frugal minimal example: spirals with an MLP");
  const frugal::CommandLine& cli = start.cli;
  if (cli.exit_code) {
    std::cout << cli.message;
    return *cli.exit_code;
  }

  torch::manual_seed(static_cast<uint64_t>(m.seed));
  std::shared_ptr<const frugal::Dataset> train, validation;
  int64_t inputs = 2;
  if (!m.data_dir.empty()) {
    const minimal::Arrays arrays = minimal::load_arrays(m.data_dir);
    std::tie(train, validation, inputs, m.classes) = std::make_tuple(arrays.train, arrays.validation, arrays.features, arrays.classes);
    frugal::log::info(c10::str("data: ", arrays.train->size(), " training and ", arrays.validation->size(), " validation rows of ", inputs,
                               " features, ", m.classes, " classes, from ", m.data_dir));
  } else if (m.shard_cache.empty()) {
    train = minimal::make_spirals(m.train_examples, m.classes, m.noise, static_cast<uint64_t>(m.seed) + 1);
    validation = minimal::make_spirals(m.validation_examples, m.classes, m.noise, static_cast<uint64_t>(m.seed) + 2);
  } else {
    std::tie(train, validation) = sharded_spirals(m, options.shards);
  }
  frugal::preemption::stop_if_requested("preparing the data");
  Mlp net(inputs, m.hidden, m.layers, m.classes);
  frugal::Model model(
      net.ptr(),
      frugal::LossFn<MlpImpl>([](MlpImpl& n, const frugal::Batch& b) { return torch::cross_entropy_loss(n.forward(b.input), b.target); }),
      frugal::MetricsFn<MlpImpl>([](MlpImpl& n, const frugal::Batch& b) {
        auto logits = n.forward(b.input);
        return frugal::BatchMetrics{{"loss", torch::cross_entropy_loss(logits, b.target)},
                                    {"accuracy", (logits.argmax(1) == b.target).to(torch::kFloat).mean()}};
      }));
  const double lr = m.lr, weight_decay = m.weight_decay;
  frugal::Trainer trainer(model, [lr, weight_decay](torch::nn::Module& module) {
    return std::make_unique<torch::optim::AdamW>(module.parameters(), torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
  }, train, options.trainer, options.data);
  trainer.set_validation_data(validation);
  auto schedule = [&] {  // over the optimizer steps of this rank's share of the data
    const int64_t total_steps = options.trainer.max_epochs() * frugal::optimizer_steps_per_epoch(trainer, options);
    trainer.set_lr_schedule(frugal::lr::cosine(total_steps / 20, std::max<int64_t>(total_steps, total_steps / 20 + 1), 0.05));
  };

  if (cli.smoke_test_only) {
    schedule();
    return frugal::run_smoke_test_only(trainer, options.smoke_test);
  }
  frugal::add_policies(trainer, options, config.to_toml());  // connects to the other ranks, if any
  schedule();
  frugal::FitResult result = trainer.fit();
  if (trainer.rank() != 0) return 0;
  const auto& v = result.state.last_validation;
  std::cout << "minimal: " << (trainer.world_size() > 1 ? c10::str(trainer.world_size(), " processes, ") : "")
            << result.state.step << " steps in " << result.seconds << " s ("
            << static_cast<int64_t>(result.samples_per_second) << " samples/s), final train loss " << result.train_loss;
  for (const auto& [name, value] : v) std::cout << ", validation " << name << " " << value;
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::exit_process(frugal::run_program("frugal_minimal", [&] { return run(argc, argv); }));
}
