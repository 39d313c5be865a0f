// libFuzzer target for what a resume reads from a checkpoint folder that the sharded checkpoints
// added: meta.json (its layout of shards), the manifest checks, the shard files and the optimizer
// state carried across layouts. The input is split in two at the first 0xFF byte: meta.json, then
// the bytes of shard 0's optimizer file. A well-formed checkpoint around them (state.pt, a weights
// shard, a manifest with the right sizes and checksums) makes the reader get as far as the bytes
// allow. Every failure must be a frugal::Error (CheckpointError): anything else, or a crash, is a bug.
//
//   bash scripts/fuzz.sh [SECONDS] checkpoint   (clang, libFuzzer, AddressSanitizer and UBSan)

#include <torch/torch.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/durable_io.hpp"
#include "frugal/checkpoint/consolidate.hpp"
#include "frugal/errors.hpp"
#include "optim/portable_state.hpp"

namespace fs = std::filesystem;

namespace {

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::string archive_bytes(torch::serialize::OutputArchive& a) {
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}

// The files of a real one-rank sharded checkpoint, made once.
struct Seed {
  std::string state, weights;
  Seed() {
    torch::serialize::OutputArchive s;
    s.write("t0", torch::zeros({3}), true);
    state = archive_bytes(s);
    torch::serialize::OutputArchive w;
    w.write("w0", torch::ones({6}), true);
    weights = archive_bytes(w);
  }
};

}  // namespace

// With FRUGAL_FUZZ_SEED_DIR set: writes a valid input there (a one-rank layout of one parameter and
// an SGD optimizer's state for it), the corpus to start from.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("FRUGAL_FUZZ_SEED_DIR");
  if (!dir) return 0;
  torch::Tensor piece = torch::zeros({6}, torch::requires_grad());
  torch::optim::SGD sgd(std::vector<torch::Tensor>{piece}, torch::optim::SGDOptions(0.1).momentum(0.9));
  piece.mutable_grad() = torch::ones({6});
  sgd.step();
  torch::serialize::OutputArchive a;
  sgd.save(a);
  const std::string meta =
      R"({"format": 1, "step": 1, "unix_time": 0, "weights_dtype": "fp32", "world_size": 1,
          "state": {"epoch": 0, "micro_step": 1, "step": 1, "skipped_steps": 0, "samples_seen": 4, "lr": 0.1, "last_validation": {}},
          "data": {"epoch": 0, "batch_index": 1, "seed": 0, "batch_size": 4}, "tensors": ["model/b"],
          "sharding": {"world_size": 1, "shapes": {"w": [2, 3]},
                       "pieces": [[{"param": "w", "begin": 0, "numel": 6, "group": 0, "index": 0}]]}})";
  write(fs::path(dir) / "seed", meta + '\xff' + archive_bytes(a));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Seed seed;
  static const fs::path root = fs::temp_directory_path() / ("frugal_fuzz_" + std::to_string(::getpid()));
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\xff');
  const std::string meta = input.substr(0, cut);
  const std::string optimizer = cut == std::string::npos ? std::string() : input.substr(cut + 1);

  const fs::path dir = root / "ckpt-000000001";
  fs::remove_all(root);
  fs::create_directories(dir);
  const std::vector<std::pair<std::string, std::string>> files{{"state.pt", seed.state},
                                                               {"meta.json", meta},
                                                               {"shard-00000-of-00001.weights.pt", seed.weights},
                                                               {"shard-00000-of-00001.optimizer.pt", optimizer}};
  std::string manifest = "{\"files\": [";
  for (size_t i = 0; i < files.size(); ++i) {
    write(dir / files[i].first, files[i].second);
    manifest += (i ? "," : "") + std::string("{\"name\": \"") + files[i].first + "\", \"size\": " + std::to_string(files[i].second.size()) +
                ", \"crc32\": " + std::to_string(frugal::detail::crc32_of(files[i].second)) + "}";
  }
  write(dir / "manifest.json", manifest + "]}");
  try {
    frugal::CheckpointStore store(root);
    if (!store.verify(dir).empty()) return 0;
    for (const auto& info : store.list()) {
      if (store.sharding_of(info)) frugal::consolidated_weights(store, info);
      const frugal::TrainingSnapshot s = store.read(info);
      if (!s.shards) continue;
      const auto contents = frugal::read_shard(*s.shards, 0);
      frugal::detail::PortableOptimizerState state;
      state.add_serialized(contents.optimizer, frugal::detail::slots_of(s.shards->info.pieces.at(0), 1), "fuzz");
    }
  } catch (const frugal::Error&) {
  }
  return 0;
}
