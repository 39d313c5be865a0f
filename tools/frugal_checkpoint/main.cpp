// frugal-checkpoint: inspects, verifies and exports Frugal checkpoints, sharded or not.
//
//   frugal-checkpoint info runs/x/checkpoints/ckpt-000001000
//   frugal-checkpoint verify runs/x/checkpoints/ckpt-000001000   # every file against the manifest
//   frugal-checkpoint export runs/x/checkpoints/ckpt-000001000 model.safetensors [--dtype bf16]
//   frugal-checkpoint export runs/x/checkpoints model.safetensors  # the newest valid one
//   frugal-checkpoint list s3://bucket/runs/x                       # committed remote checkpoints
//   frugal-checkpoint download s3://bucket/runs/x restore/          # the newest that verifies
//   frugal-checkpoint verify s3://bucket/runs/x/ckpt-000001000      # downloaded, then checked
// s3:// paths use the AWS_* credentials and endpoint variables, or --endpoint / --region.

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <iostream>

#include "frugal/base/precision.hpp"
#include "frugal/checkpoint/consolidate.hpp"
#include "frugal/config/exit_process.hpp"
#include "frugal/errors.hpp"
#include "frugal/io/safetensors.hpp"
#include "frugal/remote/remote_checkpoints.hpp"

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

bool is_remote(const std::string& path) { return path.rfind("s3://", 0) == 0; }

// s3://bucket/prefix/ckpt-<step> names one checkpoint; s3://bucket/prefix the newest committed one
// that verifies. Downloaded into `into` (a checkpoints directory); returns the folder.
fs::path download(const std::string& url, const frugal::S3ClientOptions& options, const fs::path& into) {
  const auto slash = url.find_last_of('/');
  std::string location_url = url, name;
  if (slash != std::string::npos && frugal::remote_checkpoint_step(url.substr(slash + 1))) {
    location_url = url.substr(0, slash);
    name = url.substr(slash + 1);
  }
  frugal::RemoteCheckpoints remote(frugal::S3Location::parse(location_url, "checkpoint"), options);
  std::vector<std::string> names;
  if (!name.empty()) {
    names.push_back(name);
  } else {
    const auto committed = remote.committed();
    for (auto it = committed.rbegin(); it != committed.rend(); ++it) names.push_back(it->name);
    if (names.empty()) throw frugal::CheckpointError(location_url + ": no committed checkpoint there");
  }
  frugal::CheckpointStore store(into);
  fs::create_directories(into);
  for (const auto& n : names) {
    const fs::path target = into / n;
    fs::remove_all(target);
    std::string reason = remote.download(n, target);
    if (reason.empty()) reason = store.verify(target);
    if (reason.empty()) return target;
    fs::remove_all(target);
    std::cerr << "frugal-checkpoint: " << remote.url_of(n) << ": " << reason << (name.empty() ? " (trying the next older one)" : "") << "\n";
  }
  throw frugal::CheckpointError(url + ": no remote checkpoint there verifies");
}

}  // namespace

int run(int argc, char** argv) {
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
  auto* lister = app.add_subcommand("list", "The checkpoints of a directory, or the committed ones under s3://bucket/prefix");
  lister->add_option("checkpoints", path, "checkpoints directory or s3://bucket/prefix")->required();
  auto* downloader = app.add_subcommand("download", "Download a remote checkpoint (the newest that verifies) and check it");
  downloader->add_option("remote", path, "s3://bucket/prefix or s3://bucket/prefix/ckpt-<step>")->required();
  downloader->add_option("directory", out, "checkpoints directory to download into")->required();
  frugal::S3ClientOptions s3;
  std::string addressing = "auto";
  for (auto* command : {info, verify, exporter, lister, downloader}) {
    command->add_option("--endpoint", s3.endpoint, "S3 endpoint for s3:// paths (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS)");
    command->add_option("--region", s3.region, "S3 signing region (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1)");
    command->add_option("--addressing", addressing, "auto, path or virtual")->check(CLI::IsMember(frugal::enum_choices<frugal::S3Addressing>()));
  }
  CLI11_PARSE(app, argc, argv);
  s3.addressing = *frugal::parse_enum<frugal::S3Addressing>(addressing);  // IsMember checked it
  try {
    if (lister->parsed()) {
      if (is_remote(path)) {
        frugal::RemoteCheckpoints remote(frugal::S3Location::parse(path, "checkpoints"), s3);
        for (const auto& c : remote.committed()) std::cout << remote.url_of(c.name) << "  step " << c.step << "\n";
      } else {
        for (const auto& c : frugal::CheckpointStore(path).list()) std::cout << c.dir.string() << "  step " << c.step << "\n";
      }
      return 0;
    }
    if (downloader->parsed()) {
      std::cout << "downloaded and verified: " << download(path, s3, out).string() << "\n";
      return 0;
    }
    // Remote checkpoints are read from a local copy in a temporary directory.
    struct TemporaryDirectory {
      fs::path path;
      ~TemporaryDirectory() {
        std::error_code ignored;
        if (!path.empty()) fs::remove_all(path, ignored);
      }
    } scratch;
    if (is_remote(path)) {
      scratch.path = fs::temp_directory_path() / ("frugal-checkpoint-" + std::to_string(::getpid()));
      path = download(path, s3, scratch.path).string();
    }
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

int main(int argc, char** argv) { frugal::exit_process(run(argc, argv)); }
