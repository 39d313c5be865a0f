#include "frugal/checkpoint/checkpoint_store.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/host_memory.hpp"
#include "base/checkpoint_names.hpp"
#include "base/durable_file.hpp"
#include "base/durable_io.hpp"
#include "frugal/log.hpp"

namespace frugal {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kState = "state.pt";
constexpr const char* kOptimizer = "optimizer.pt";
constexpr const char* kMeta = "meta.json";
constexpr const char* kConfig = "config.toml";
constexpr const char* kManifest = "manifest.json";
constexpr int64_t kMaxWorldSize = 1 << 20;  // ranks: far above any job, far below a hang

std::optional<int64_t> step_of(const fs::path& dir) { return detail::checkpoint_folder_step(dir.filename().string()); }

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

torch::Tensor stored(const std::string& key, const torch::Tensor& t, Precision dtype) {
  if (dtype == Precision::fp32 || key.rfind("model/", 0) != 0 || !t.is_floating_point()) return t;
  return t.to(scalar_type_of(dtype));
}

json sharding_to_json(const ShardingInfo& info) {
  json pieces = json::array();
  for (const auto& rank : info.pieces) {
    json list = json::array();
    for (const auto& p : rank) {
      list.push_back({{"param", p.param}, {"begin", p.begin}, {"numel", p.numel}, {"group", p.group}, {"index", p.index}});
    }
    pieces.push_back(std::move(list));
  }
  return {{"world_size", info.world_size}, {"shapes", info.shapes}, {"pieces", pieces}};
}

ShardingInfo sharding_from_json(const json& j) {
  ShardingInfo info;
  info.world_size = j.at("world_size");
  info.shapes = j.at("shapes").get<std::map<std::string, std::vector<int64_t>>>();
  for (const auto& rank : j.at("pieces")) {
    auto& list = info.pieces.emplace_back();
    for (const auto& p : rank) list.push_back({p.at("param"), p.at("begin"), p.at("numel"), p.at("group"), p.at("index")});
  }
  if (info.world_size < 1 || static_cast<int64_t>(info.pieces.size()) != info.world_size) {
    throw CheckpointError(c10::str("meta.json: sharding lists ", info.pieces.size(), " ranks for a world of ", info.world_size));
  }
  // Counts from a file are checked before anything is sized by them: every shape has a size that
  // fits in 64 bits, and the pieces cover each parameter's elements exactly.
  std::map<std::string, int64_t> numel, covered;
  for (const auto& [name, shape] : info.shapes) {
    int64_t n = 1;
    for (const int64_t d : shape) {
      if (d < 0 || __builtin_mul_overflow(n, d, &n)) throw CheckpointError(c10::str("meta.json: '", name, "' has shape ", c10::IntArrayRef(shape)));
    }
    numel[name] = n;
  }
  for (const auto& rank : info.pieces) {
    for (const auto& p : rank) {
      const auto n = numel.find(p.param);
      int64_t end = 0;
      if (n == numel.end() || p.begin < 0 || p.numel < 0 || p.group < 0 || p.index < 0 ||
          __builtin_add_overflow(p.begin, p.numel, &end) || end > n->second || __builtin_add_overflow(covered[p.param], p.numel, &end)) {
        throw CheckpointError(c10::str("meta.json: a shard piece of '", p.param, "' (elements ", p.begin, " + ", p.numel,
                                       ") does not fit its parameter"));
      }
      covered[p.param] = end;
    }
  }
  for (const auto& [name, n] : numel) {
    if (covered[name] != n) throw CheckpointError(c10::str("meta.json: the shard pieces of '", name, "' cover ", covered[name], " of its ", n, " elements"));
  }
  return info;
}

// No more elements than the shard files could hold at one byte each: a meta.json that claims
// more (damaged, or from another checkpoint) is refused before any tensor is allocated for it.
void check_sharding_against_files(const ShardingInfo& info, const fs::path& dir) {
  uintmax_t bytes = 0, elements = 0;
  for (int64_t r = 0; r < info.world_size; ++r) {
    std::error_code error;
    const auto size = fs::file_size(dir / CheckpointStore::shard_file(r, info.world_size, "weights"), error);
    if (!error) bytes += size;
  }
  for (const auto& rank : info.pieces) {
    for (const auto& p : rank) elements += static_cast<uintmax_t>(p.numel);
  }
  if (elements > bytes) {
    throw CheckpointError(c10::str("meta.json: the shard pieces claim ", elements, " elements but the shard weight files hold ", bytes,
                                   " bytes"));
  }
}

// The files a checkpoint must have, whatever its manifest says.
std::vector<std::string> required_files(const json& meta) {
  std::vector<std::string> files{kState, kMeta};
  if (meta.contains("sharding")) {
    const int64_t world = meta.at("sharding").at("world_size");
    if (world < 1 || world > kMaxWorldSize) throw CheckpointError(c10::str("meta.json: sharding.world_size ", world, " is not a world size"));
    for (int64_t r = 0; r < world; ++r) {
      for (const char* kind : {"weights", "optimizer"}) files.push_back(CheckpointStore::shard_file(r, world, kind));
    }
  } else {
    files.push_back(kOptimizer);
  }
  return files;
}

// Every file of a checkpoint is written the same way: serialized straight into the file (no copy
// in memory), checksummed on the way, fsynced (detail::DurableFile). Its errors are kept and
// thrown afterwards, never inside LibTorch's serializer, whose own file writer aborts the
// process (an exception from a destructor) when the disk fills up mid-write.
FileRecord write_file(const fs::path& dir, const std::string& name, const std::function<void(detail::DurableFile&)>& fill) {
  detail::DurableFile file(dir / name);
  fill(file);
  const auto written = file.finish();
  return {name, written.size, written.xxh3};
}

FileRecord write_archive(const fs::path& dir, const std::string& name, torch::serialize::OutputArchive& archive) {
  return write_file(dir, name, [&](detail::DurableFile& file) { archive.save_to(file.writer()); });
}

// state.pt: the snapshot's named tensors (model weights in the storage dtype).
FileRecord write_state(const fs::path& dir, const TrainingSnapshot& snapshot, Precision dtype, json& names) {
  torch::serialize::OutputArchive archive;
  int64_t i = 0;
  for (const auto& [key, tensor] : snapshot.tensors) {
    archive.write(c10::str("t", i++), stored(key, tensor, dtype), /*is_buffer=*/true);
    names.push_back(key);
  }
  return write_archive(dir, kState, archive);
}

FileRecord write_bytes(const fs::path& dir, const std::string& name, const std::string& bytes) {
  return write_file(dir, name, [&](detail::DurableFile& file) { file.write(bytes.data(), bytes.size()); });
}

FileRecord write_optimizer(const fs::path& dir, const std::string& name, const TrainingSnapshot& snapshot) {
  return write_file(dir, name, [&](detail::DurableFile& file) { snapshot.write_optimizer(file.writer()); });
}

json meta_of(const TrainingSnapshot& snapshot, const CheckpointWriteOptions& options, const json& names) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  json meta{{"format", 1},
            {"step", snapshot.state.step},
            {"unix_time", now},
            {"weights_dtype", to_string(options.weights_dtype)},
            {"world_size", snapshot.world_size},
            {"state", state_to_json(snapshot.state)},
            {"data", {{"epoch", snapshot.data.epoch}, {"batch_index", snapshot.data.batch_index}, {"seed", snapshot.data.seed},
                      {"batch_size", snapshot.data.batch_size}}},
            {"tensors", names}};
  if (snapshot.sharding) meta["sharding"] = sharding_to_json(*snapshot.sharding);
  return meta;
}

// A write that failed: its folder goes (when given), and the error says what the directory still holds.
[[noreturn]] void write_failed(int64_t step, const fs::path& root, const std::exception& e, const fs::path& tmp = {}) {
  if (!tmp.empty()) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    fs::remove(root / "latest.tmp", ignored);
  }
  const auto previous = CheckpointStore(root).latest();
  throw CheckpointError(c10::str("writing checkpoint of step ", step, " to ", root.string(), " failed: ",
                                 message_of(e),
                                 previous ? " (the previous checkpoint, " + previous->filename().string() + ", is untouched)"
                                          : std::string(" (no earlier checkpoint exists)")));
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

ShardContents read_shard_files(const fs::path& dir, int64_t rank, int64_t world, size_t pieces) {
  const fs::path weights = dir / CheckpointStore::shard_file(rank, world, "weights");
  try {
    ShardContents contents;
    torch::serialize::InputArchive archive;
    archive.load_from(weights.string());
    for (size_t k = 0; k < pieces; ++k) {
      torch::Tensor t;
      archive.read(c10::str("w", k), t, /*is_buffer=*/true);
      contents.weights.push_back(t);
    }
    contents.optimizer = detail::read_file(dir / CheckpointStore::shard_file(rank, world, "optimizer"));
    return contents;
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError("reading shard " + weights.string() + " failed: " + message_of(e));
  }
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path root) : root_(std::move(root)) {}

CheckpointInfo CheckpointStore::write(const TrainingSnapshot& snapshot, const CheckpointWriteOptions& options) const {
  const int64_t step = snapshot.state.step;
  if (snapshot.sharding) throw CheckpointError("CheckpointStore::write: a sharded snapshot is written by every rank (write_shard)");
  const fs::path final_dir = root_ / detail::checkpoint_folder_name(step);
  const fs::path tmp = root_ / (detail::checkpoint_folder_name(step) + ".tmp");
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
    std::vector<FileRecord> records{write_state(tmp, snapshot, options.weights_dtype, names)};
    stage(kState);
    records.push_back(write_optimizer(tmp, kOptimizer, snapshot));
    stage(kOptimizer);
    if (!options.config_toml.empty()) records.push_back(write_bytes(tmp, kConfig, options.config_toml));
    const json meta = meta_of(snapshot, options, names);
    records.push_back(write_bytes(tmp, kMeta, meta.dump(1)));
    stage(kMeta);
    publish(tmp, final_dir, records, stage);
    return info_from_meta(final_dir, meta);
  } catch (const std::exception& e) {
    write_failed(step, root_, e, tmp);
  }
}

void CheckpointStore::publish(const fs::path& tmp, const fs::path& final_dir, const std::vector<FileRecord>& records,
                              const std::function<void(const char*)>& stage) const {
  json manifest{{"files", json::array()}};
  for (const auto& f : records) manifest["files"].push_back({{"name", f.name}, {"size", f.size}, {"xxh3", detail::hex64(f.xxh3)}});
  detail::write_file_synced(tmp / kManifest, manifest.dump(1));
  detail::fsync_directory(tmp);
  stage(kManifest);
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // an unverifiable leftover of this step
  fs::rename(tmp, final_dir);
  detail::fsync_directory(root_);
  stage("renamed");
  point_latest_at(final_dir);
  stage("latest");
}

void CheckpointStore::point_latest_at(const fs::path& dir) const {
  detail::write_file_synced(root_ / "latest.tmp", dir.filename().string() + "\n");
  fs::rename(root_ / "latest.tmp", root_ / "latest");
  detail::fsync_directory(root_);
}

fs::path CheckpointStore::adopt(const fs::path& incoming, const std::string& name) const {
  const fs::path final_dir = root_ / name;
  if (fs::exists(final_dir)) move_aside(final_dir);  // a local copy of that step that failed its check
  fs::rename(incoming, final_dir);
  detail::fsync_directory(root_);
  point_latest_at(final_dir);
  return final_dir;
}

std::string CheckpointStore::shard_file(int64_t rank, int64_t world_size, const std::string& kind) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05lld-of-%05lld.", static_cast<long long>(rank), static_cast<long long>(world_size));
  return name + kind + ".pt";
}

bool CheckpointStore::begin_sharded(int64_t step) const {
  const fs::path final_dir = root_ / detail::checkpoint_folder_name(step);
  const fs::path tmp = root_ / (detail::checkpoint_folder_name(step) + ".tmp");
  try {
    if (fs::exists(final_dir / kManifest) && verify(final_dir).empty()) return false;
    fs::create_directories(root_);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    detail::fsync_directory(root_);
    return true;
  } catch (const std::exception& e) {
    write_failed(step, root_, e);
  }
}

std::vector<FileRecord> CheckpointStore::write_shard(const TrainingSnapshot& snapshot, const CheckpointWriteOptions& options) const {
  if (!snapshot.sharding) throw CheckpointError("CheckpointStore::write_shard: the snapshot is not sharded");
  const int64_t step = snapshot.state.step, rank = snapshot.rank, world = snapshot.sharding->world_size;
  const fs::path tmp = root_ / (detail::checkpoint_folder_name(step) + ".tmp");
  try {
    if (!fs::is_directory(tmp)) throw CheckpointError(c10::str(tmp.string(), " does not exist: rank 0 did not begin this checkpoint"));
    std::vector<FileRecord> records;
    {
      torch::serialize::OutputArchive archive;
      for (size_t k = 0; k < snapshot.shard_weights.size(); ++k) {
        archive.write(c10::str("w", k), stored("model/", snapshot.shard_weights[k], options.weights_dtype), /*is_buffer=*/true);
      }
      records.push_back(write_archive(tmp, shard_file(rank, world, "weights"), archive));
    }
    records.push_back(write_optimizer(tmp, shard_file(rank, world, "optimizer"), snapshot));
    if (options.on_stage) options.on_stage("shard");
    if (rank == 0) {
      json names = json::array();
      records.push_back(write_state(tmp, snapshot, options.weights_dtype, names));
      if (!options.config_toml.empty()) records.push_back(write_bytes(tmp, kConfig, options.config_toml));
      if (options.on_stage) options.on_stage(kState);
    }
    return records;
  } catch (const std::exception& e) {
    write_failed(step, root_, e);
  }
}

CheckpointInfo CheckpointStore::finish_sharded(const TrainingSnapshot& snapshot, const std::vector<FileRecord>& records,
                                               const CheckpointWriteOptions& options) const {
  const int64_t step = snapshot.state.step;
  const fs::path final_dir = root_ / detail::checkpoint_folder_name(step);
  const fs::path tmp = root_ / (detail::checkpoint_folder_name(step) + ".tmp");
  auto stage = [&](const char* name) {
    if (options.on_stage) options.on_stage(name);
  };
  try {
    json names = json::array();
    for (const auto& [key, tensor] : snapshot.tensors) names.push_back(key);
    const json meta = meta_of(snapshot, options, names);
    std::vector<FileRecord> all = records;
    all.push_back(write_bytes(tmp, kMeta, meta.dump(1)));
    stage(kMeta);
    for (const auto& required : required_files(meta)) {
      if (std::none_of(all.begin(), all.end(), [&](const FileRecord& f) { return f.name == required; })) {
        throw CheckpointError("no rank reported writing " + required);
      }
    }
    publish(tmp, final_dir, all, stage);
    return info_from_meta(final_dir, meta);
  } catch (const std::exception& e) {
    write_failed(step, root_, e, tmp);
  }
}

std::shared_ptr<const ShardingInfo> CheckpointStore::sharding_of(const CheckpointInfo& info) const {
  try {
    const json meta = json::parse(detail::read_file(info.dir / kMeta));
    if (!meta.contains("sharding")) return nullptr;
    return std::make_shared<const ShardingInfo>(sharding_from_json(meta.at("sharding")));
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError("reading " + (info.dir / kMeta).string() + " failed: " + e.what());
  }
}

std::string CheckpointStore::verify(const fs::path& dir, const std::function<bool(const std::string&)>& checksum) const {
  if (!fs::is_directory(dir)) return "no such directory";
  if (!fs::exists(dir / kManifest)) return "no manifest.json: the write did not finish";
  json manifest;
  try {
    manifest = json::parse(detail::read_file(dir / kManifest));
    std::set<std::string> listed;
    for (const auto& f : manifest.at("files")) {
      const std::string name = f.at("name");
      // A name like ../../state.pt would check, and have the reader load, a file outside.
      if (!detail::plain_file_name(name)) return "the manifest lists '" + name + "', which is not a plain file name in the checkpoint's folder";
      if (!listed.insert(name).second) return "the manifest lists " + name + " twice";
    }
    if (!listed.count(kMeta)) return "the manifest does not list meta.json";
    for (const auto& f : manifest.at("files")) {
      const std::string name = f.at("name");
      const fs::path path = dir / name;
      if (!fs::exists(path)) return "missing file " + name;
      const auto size = fs::file_size(path);
      if (size != f.at("size").get<uintmax_t>()) {
        return c10::str(name, " is ", size, " bytes but the manifest says ", f.at("size").get<uintmax_t>(), " (truncated?)");
      }
      if (checksum && name != kMeta && !checksum(name)) continue;
      if (f.contains("xxh3")) {
        const std::string want = f.at("xxh3").get<std::string>(), got = detail::hex64(detail::xxh3_of_file(path));
        if (got != want) return c10::str(name, " fails its checksum (xxh3 ", got, ", manifest ", want, "): corrupt");
        continue;
      }
      const uint32_t crc = detail::crc32_of_file(path);  // checkpoints written before XXH3
      if (crc != f.at("crc32").get<uint32_t>()) {
        return c10::str(name, " fails its checksum (crc32 ", crc, ", manifest ", f.at("crc32").get<uint32_t>(), "): corrupt");
      }
    }
    // Every file the reader needs must be listed (and so checked), whatever the manifest says.
    for (const auto& required : required_files(json::parse(detail::read_file(dir / kMeta)))) {
      if (!listed.count(required)) return "missing file " + required + " (the manifest does not list it)";
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

std::optional<std::string> CheckpointStore::latest_name() const {
  std::ifstream in(root_ / "latest");
  std::string name;
  if (!std::getline(in, name)) return std::nullopt;
  return name;
}

std::optional<fs::path> CheckpointStore::latest() const {
  const auto name = latest_name();
  // Only a checkpoint folder of this store: never a path that leads elsewhere.
  if (!name || !step_of(*name) || !fs::is_directory(root_ / *name)) return std::nullopt;
  return root_ / *name;
}

fs::path CheckpointStore::move_aside(const fs::path& dir) const {
  fs::path target = dir.string() + ".damaged";
  for (int i = 2; fs::exists(target); ++i) target = c10::str(dir.string(), ".damaged-", i);
  fs::rename(dir, target);
  return target;
}

std::vector<fs::path> CheckpointStore::damaged() const {
  std::vector<fs::path> out;
  if (!fs::is_directory(root_)) return out;
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (entry.path().filename().string().find(".damaged") != std::string::npos) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<FoundCheckpoint> CheckpointStore::find_latest_valid() const {
  FoundCheckpoint found;
  if (!fs::is_directory(root_)) return std::nullopt;
  auto all = list();
  if (all.empty()) return std::nullopt;  // a fresh directory: nothing to say
  const auto pointer = latest();
  if (!pointer) found.skipped.push_back((root_ / "latest").string() + ": missing; scanning the checkpoints");
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
    if (meta.contains("sharding")) {
      auto source = std::make_shared<ShardSource>();
      source->info = sharding_from_json(meta.at("sharding"));
      check_sharding_against_files(source->info, info.dir);
      source->location = info.dir.string();
      source->read = [dir = info.dir, world = source->info.world_size, pieces = source->info.pieces](int64_t rank) {
        return read_shard_files(dir, rank, world, pieces.at(static_cast<size_t>(rank)).size());
      };
      s.shards = std::move(source);
    } else {
      s.optimizer = detail::read_file(info.dir / kOptimizer);
    }
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
    throw CheckpointError("reading checkpoint " + info.dir.string() + " failed: " +
                          message_of(e));
  }
}

void CheckpointStore::remove(const fs::path& dir) const {
  const fs::path aside = dir.string() + ".deleting";
  fs::remove_all(aside);
  fs::rename(dir, aside);
  detail::fsync_directory(root_);
  fs::remove_all(aside);
}

void CheckpointStore::remove_unfinished() const {
  if (!fs::is_directory(root_)) return;
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (entry.path().extension() == ".tmp" || entry.path().extension() == ".deleting") {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
}

}  // namespace frugal
