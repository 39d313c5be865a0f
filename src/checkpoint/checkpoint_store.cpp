#include "frugal/checkpoint/checkpoint_store.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/detail/host_memory.hpp"
#include "detail/durable_io.hpp"
#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;
using nlohmann::json;

std::string to_string(WeightsDtype dtype) {
  switch (dtype) {
    case WeightsDtype::fp32: return "fp32";
    case WeightsDtype::fp16: return "fp16";
    case WeightsDtype::bf16: return "bf16";
  }
  return "?";
}

namespace {

constexpr const char* kState = "state.pt";
constexpr const char* kOptimizer = "optimizer.pt";
constexpr const char* kMeta = "meta.json";
constexpr const char* kConfig = "config.toml";
constexpr const char* kManifest = "manifest.json";

std::string dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%09lld", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> step_of(const fs::path& dir) {
  static const std::regex pattern("ckpt-([0-9]+)");
  std::smatch m;
  const std::string name = dir.filename().string();
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  return std::stoll(m[1].str());
}

json state_to_json(const TrainerState& s) {
  return {{"epoch", s.epoch}, {"micro_step", s.micro_step}, {"step", s.step}, {"skipped_steps", s.skipped_steps},
          {"samples_seen", s.samples_seen}, {"lr", s.lr}, {"last_validation", s.last_validation}};
}

TrainerState state_from_json(const json& j) {
  TrainerState s;
  s.epoch = j.at("epoch");
  s.micro_step = j.at("micro_step");
  s.step = j.at("step");
  s.skipped_steps = j.at("skipped_steps");
  s.samples_seen = j.at("samples_seen");
  s.lr = j.at("lr");
  s.last_validation = j.at("last_validation").get<Metrics>();
  return s;
}

torch::Tensor stored(const std::string& key, const torch::Tensor& t, WeightsDtype dtype) {
  if (dtype == WeightsDtype::fp32 || key.rfind("model/", 0) != 0 || !t.is_floating_point()) return t;
  return t.to(dtype == WeightsDtype::fp16 ? torch::kHalf : torch::kBFloat16);
}

CheckpointInfo info_from_meta(const fs::path& dir, const json& meta) {
  CheckpointInfo info;
  info.dir = dir;
  info.step = meta.at("step");
  info.unix_time = meta.at("unix_time");
  info.metrics = meta.at("state").at("last_validation").get<Metrics>();
  info.weights_dtype = meta.at("weights_dtype");
  return info;
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path root) : root_(std::move(root)) {}

CheckpointInfo CheckpointStore::write(const TrainingSnapshot& snapshot, const CheckpointWriteOptions& options) const {
  const int64_t step = snapshot.state.step;
  const fs::path final_dir = root_ / dir_name(step);
  const fs::path tmp = root_ / (dir_name(step) + ".tmp");
  auto stage = [&](const char* name) {
    if (options.on_stage) options.on_stage(name);
  };
  try {
    if (fs::exists(final_dir / kManifest) && verify(final_dir).empty()) {
      return info_from_meta(final_dir, json::parse(detail::read_file(final_dir / kMeta)));  // this step is saved
    }
    fs::create_directories(root_);
    fs::remove_all(tmp);
    fs::create_directories(tmp);

    json names = json::array();
    std::map<std::string, uint32_t> crcs;  // of each file, from the bytes written
    {
      torch::serialize::OutputArchive archive;
      int64_t i = 0;
      for (const auto& [key, tensor] : snapshot.tensors) {
        archive.write(c10::str("t", i++), stored(key, tensor, options.weights_dtype), /*is_buffer=*/true);
        names.push_back(key);
      }
      // Serialized in memory, then written by us: LibTorch's file writer aborts the process
      // (an exception from a destructor) when the disk fills up mid-write.
      crcs[kState] = detail::write_file_synced(tmp / kState, detail::archive_bytes(archive));
    }
    stage(kState);
    crcs[kOptimizer] = detail::write_file_synced(tmp / kOptimizer, snapshot.optimizer_bytes());
    stage(kOptimizer);
    std::vector<std::string> files{kState, kOptimizer, kMeta};
    if (!options.config_toml.empty()) {
      crcs[kConfig] = detail::write_file_synced(tmp / kConfig, options.config_toml);
      files.push_back(kConfig);
    }
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    json meta{{"format", 1},
              {"step", step},
              {"unix_time", now},
              {"weights_dtype", to_string(options.weights_dtype)},
              {"world_size", snapshot.world_size},
              {"state", state_to_json(snapshot.state)},
              {"data", {{"epoch", snapshot.data.epoch}, {"batch_index", snapshot.data.batch_index}, {"seed", snapshot.data.seed},
                        {"batch_size", snapshot.data.batch_size}}},
              {"tensors", names}};
    crcs[kMeta] = detail::write_file_synced(tmp / kMeta, meta.dump(1));
    stage(kMeta);
    json manifest{{"files", json::array()}};
    for (const auto& f : files) {
      manifest["files"].push_back({{"name", f}, {"size", fs::file_size(tmp / f)}, {"crc32", crcs.at(f)}});
    }
    detail::write_file_synced(tmp / kManifest, manifest.dump(1));
    detail::fsync_directory(tmp);
    stage(kManifest);

    if (fs::exists(final_dir)) fs::remove_all(final_dir);  // an unverifiable leftover of this step
    fs::rename(tmp, final_dir);
    detail::fsync_directory(root_);
    stage("renamed");
    detail::write_file_synced(root_ / "latest.tmp", final_dir.filename().string() + "\n");
    fs::rename(root_ / "latest.tmp", root_ / "latest");
    detail::fsync_directory(root_);
    stage("latest");
    return info_from_meta(final_dir, meta);
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    fs::remove(root_ / "latest.tmp", ignored);
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    throw CheckpointError(c10::str("writing checkpoint of step ", step, " to ", root_.string(), " failed: ",
                                   c10_error ? c10_error->what_without_backtrace() : e.what(),
                                   " (the previous checkpoint is untouched)"));
  }
}

std::string CheckpointStore::verify(const fs::path& dir) const {
  if (!fs::is_directory(dir)) return "no such directory";
  if (!fs::exists(dir / kManifest)) return "no manifest.json: the write did not finish";
  json manifest;
  try {
    manifest = json::parse(detail::read_file(dir / kManifest));
    for (const auto& f : manifest.at("files")) {
      const std::string name = f.at("name");
      const fs::path path = dir / name;
      if (!fs::exists(path)) return "missing file " + name;
      const auto size = fs::file_size(path);
      if (size != f.at("size").get<uintmax_t>()) {
        return c10::str(name, " is ", size, " bytes but the manifest says ", f.at("size").get<uintmax_t>(), " (truncated?)");
      }
      const uint32_t crc = detail::crc32_of_file(path);
      if (crc != f.at("crc32").get<uint32_t>()) {
        return c10::str(name, " fails its checksum (crc32 ", crc, ", manifest ", f.at("crc32").get<uint32_t>(), "): corrupt");
      }
    }
  } catch (const std::exception& e) {
    return std::string("unreadable manifest.json: ") + e.what();
  }
  return "";
}

std::vector<CheckpointInfo> CheckpointStore::list() const {
  std::vector<CheckpointInfo> out;
  if (!fs::is_directory(root_)) return out;
  for (const auto& entry : fs::directory_iterator(root_)) {
    auto step = step_of(entry.path());
    if (!entry.is_directory() || !step) continue;
    try {
      out.push_back(info_from_meta(entry.path(), json::parse(detail::read_file(entry.path() / kMeta))));
    } catch (const std::exception&) {
      CheckpointInfo broken;  // listed so that retention can clear it away
      broken.dir = entry.path();
      broken.step = *step;
      out.push_back(broken);
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<fs::path> CheckpointStore::latest() const {
  std::ifstream in(root_ / "latest");
  std::string name;
  if (!(in >> name)) return std::nullopt;
  return root_ / name;
}

std::optional<FoundCheckpoint> CheckpointStore::find_latest_valid() const {
  FoundCheckpoint found;
  if (!fs::is_directory(root_)) return std::nullopt;
  const auto pointer = latest();
  if (!pointer) found.skipped.push_back((root_ / "latest").string() + ": missing; scanning the checkpoints");
  auto all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string reason = verify(it->dir);
    if (reason.empty()) {
      found.info = *it;
      return found;
    }
    found.skipped.push_back(it->dir.string() + ": " + reason);
  }
  for (const auto& s : found.skipped) log::warn("checkpoint skipped: " + s);
  return std::nullopt;
}

TrainingSnapshot CheckpointStore::read(const CheckpointInfo& info) const {
  try {
    const json meta = json::parse(detail::read_file(info.dir / kMeta));
    TrainingSnapshot s;
    torch::serialize::InputArchive archive;
    archive.load_from((info.dir / kState).string());
    int64_t i = 0;
    for (const auto& name : meta.at("tensors")) {
      torch::Tensor t;
      archive.read(c10::str("t", i++), t, /*is_buffer=*/true);
      s.tensors[name.get<std::string>()] = t;
    }
    s.optimizer = detail::read_file(info.dir / kOptimizer);
    s.state = state_from_json(meta.at("state"));
    const auto& d = meta.at("data");
    s.data = {d.at("epoch"), d.at("batch_index"), d.at("seed"), d.value("batch_size", int64_t{0})};
    s.world_size = meta.at("world_size");
    if (info.weights_dtype != "fp32") {
      log::warn("checkpoint " + info.dir.string() + " stores the weights in " + info.weights_dtype +
                ": the resume continues from rounded weights, not exactly");
    }
    return s;
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    throw CheckpointError("reading checkpoint " + info.dir.string() + " failed: " +
                          (c10_error ? c10_error->what_without_backtrace() : e.what()));
  }
}

void CheckpointStore::remove_unfinished() const {
  if (!fs::is_directory(root_)) return;
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (entry.path().extension() == ".tmp") {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
}

}  // namespace frugal
