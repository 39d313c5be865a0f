// frugal-checkpoint: inspects, verifies and exports Frugal checkpoints, sharded or not.
//
//   frugal-checkpoint info runs/x/checkpoints/ckpt-000001000
//   frugal-checkpoint verify runs/x/checkpoints/ckpt-000001000   # every file against the manifest
//   frugal-checkpoint export runs/x/checkpoints/ckpt-000001000 model.safetensors [--dtype bf16]
//   frugal-checkpoint export runs/x/checkpoints model.safetensors  # the newest valid one

#include <CLI/CLI.hpp>

#include <iostream>

#include "frugal/base/precision.hpp"
#include "frugal/checkpoint/consolidate.hpp"
#include "frugal/errors.hpp"
#include "frugal/io/safetensors.hpp"

namespace {
namespace fs = std::filesystem;

// A checkpoint folder, or a checkpoints directory (its newest valid checkpoint).
std::pair<frugal::CheckpointStore, frugal::CheckpointInfo> locate(const fs::path& path) {
  if (fs::exists(path / "manifest.json") || fs::exists(path / "meta.json")) {
    frugal::CheckpointStore store(path.parent_path());
    for (const auto& info : store.list()) {
      if (fs::equivalent(info.dir, path)) return {store, info};
    }
    throw frugal::CheckpointError(path.string() + ": not a complete checkpoint (no readable meta.json)");
  }
  frugal::CheckpointStore store(path);
  auto found = store.find_latest_valid();
  if (!found) throw frugal::CheckpointError(path.string() + ": no valid checkpoint here");
  return {store, found->info};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"frugal-checkpoint: inspect, verify and export Frugal checkpoints (sharded or not)"};
  app.require_subcommand(1);
  std::string path, out, dtype = "fp32";
  auto* info = app.add_subcommand("info", "Step, world size, sharding and files of a checkpoint");
  info->add_option("checkpoint", path, "ckpt-<step> folder, or a checkpoints directory")->required();
  auto* verify = app.add_subcommand("verify", "Check every file against the manifest; exit 1 naming the first damage");
  verify->add_option("checkpoint", path, "ckpt-<step> folder")->required();
  auto* exporter = app.add_subcommand("export", "Write the whole model's weights as safetensors, gathered from every shard");
  exporter->add_option("checkpoint", path, "ckpt-<step> folder, or a checkpoints directory (its newest valid one)")->required();
  exporter->add_option("output", out, "safetensors file to write")->required();
  exporter->add_option("--dtype", dtype, "Floating-point weights as fp32, fp16 or bf16")->check(CLI::IsMember(frugal::enum_choices<frugal::Precision>()));
  CLI11_PARSE(app, argc, argv);
  try {
    if (verify->parsed()) {
      const fs::path dir(path);
      const std::string reason = frugal::CheckpointStore(dir.parent_path()).verify(dir);
      if (!reason.empty()) {
        std::cerr << path << ": " << reason << "\n";
        return 1;
      }
      std::cout << path << ": ok\n";
      return 0;
    }
    auto [store, found] = locate(path);
    const std::string reason = store.verify(found.dir);
    if (!reason.empty()) throw frugal::CheckpointError(found.dir.string() + ": " + reason);
    if (info->parsed()) {
      const auto sharding = store.sharding_of(found);
      std::cout << found.dir.string() << ": step " << found.step << ", weights " << found.weights_dtype << ", "
                << (sharding ? "sharded over " + std::to_string(sharding->world_size) + " ranks" : std::string("not sharded")) << "\n";
      for (const auto& entry : fs::directory_iterator(found.dir)) {
        std::cout << "  " << entry.path().filename().string() << "  " << fs::file_size(entry.path()) << " bytes\n";
      }
      return 0;
    }
    auto weights = frugal::consolidated_weights(store, found);
    const frugal::Precision precision = frugal::parse_enum_option<frugal::Precision>(dtype, "--dtype");
    if (precision != frugal::Precision::fp32) {
      for (auto& [name, t] : weights) {
        if (t.is_floating_point()) t = t.to(frugal::scalar_type_of(precision));
      }
    }
    frugal::write_safetensors(out, weights, {{"format", "pt"}, {"frugal_step", std::to_string(found.step)}});
    std::cout << "wrote " << weights.size() << " tensors of " << found.dir.string() << " to " << out << "\n";
    return 0;
  } catch (const frugal::Error& e) {
    std::cerr << "frugal-checkpoint: " << e.what() << "\n";
    return 1;
  }
}
