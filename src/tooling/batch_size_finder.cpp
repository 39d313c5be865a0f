#include "frugal/tooling/batch_size_finder.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>
#include <ATen/cuda/CUDAContext.h>
#include <torch/cuda.h>

#define XXH_INLINE_ALL  // header-only, as in the data pipeline
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/durable_io.hpp"
#include "frugal/base/communicator.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"
#include "tooling/detail/cpu_memory_meter.hpp"

namespace frugal {
namespace fs = std::filesystem;

void BatchSizeFinderOptions::validate() const {
  if (start() < 1) throw OptionError("start", c10::str("start must be >= 1, got ", start()));
  if (multiple_of() < 1) throw OptionError("multiple_of", c10::str("multiple_of must be >= 1, got ", multiple_of()));
  if (max() < start() || max() < multiple_of()) {
    throw OptionError("max", c10::str("max must be >= start and >= multiple_of, got ", max()));
  }
  if (!(margin() >= 0 && margin() < 1)) throw OptionError("margin", c10::str("margin must be in [0, 1), got ", margin()));
  if (cpu_memory_limit_mb() < 0) {
    throw OptionError("cpu_memory_limit_mb", c10::str("cpu_memory_limit_mb must be >= 0, got ", cpu_memory_limit_mb()));
  }
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

nlohmann::json read_cache(const fs::path& file) {
  if (file.empty() || !fs::exists(file)) return nlohmann::json::object();
  std::ifstream in(file);
  try {
    nlohmann::json cache = nlohmann::json::parse(in);
    if (cache.is_object()) return cache;
  } catch (const nlohmann::json::exception&) {
  }
  log::warn("batch size cache '" + file.string() + "' is not a JSON object: ignored and rewritten");
  return nlohmann::json::object();
}

void write_cache(const fs::path& file, const nlohmann::json& cache) {
  if (!file.parent_path().empty()) fs::create_directories(file.parent_path());
  const fs::path temporary = file.string() + ".tmp";
  detail::write_file_synced(temporary, cache.dump(1) + "\n");  // throws naming the file when the write fails
  fs::rename(temporary, file);                                  // readers see the old cache or the new one
}

// One trial on `device`: the step's peak memory, or an out-of-memory error.
BatchSizeTrial run_trial(const std::function<void(int64_t)>& trial, const torch::Device& device, int64_t n,
                         double capacity_mb, double margin) {
  BatchSizeTrial result;
  result.batch_size = n;
  try {
    if (device.is_cuda()) {
      const auto index = static_cast<c10::DeviceIndex>(device.has_index() ? device.index() : 0);
      c10::cuda::CUDACachingAllocator::emptyCache();
      c10::cuda::CUDACachingAllocator::resetPeakStats(index);
      trial(n);
      torch::cuda::synchronize(index);
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
      // Reserved, not allocated: what the process holds, fragmentation included.
      result.peak_mb = static_cast<double>(stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) / kMiB;
    } else {
      detail::CpuMemoryMeter meter;
      trial(n);
      result.peak_mb = static_cast<double>(meter.peak_bytes()) / kMiB;
    }
  } catch (const c10::OutOfMemoryError&) {
    result.why = "out of memory";
  }
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
  if (result.why.empty() && capacity_mb > 0 && result.peak_mb > (1.0 - margin) * capacity_mb) {
    result.why = c10::str("peak above ", static_cast<int64_t>(100 * (1.0 - margin)), "% of the memory");
  }
  result.fits = result.why.empty();
  log::info(c10::str("batch size ", n, ": ", result.fits ? "fits" : result.why,
                     result.peak_mb > 0 ? c10::str(", peak ", static_cast<int64_t>(result.peak_mb), " MiB") : ""));
  return result;
}

}  // namespace

BatchSizeSearch find_batch_size(const std::function<void(int64_t)>& trial, const torch::Device& device,
                                const BatchSizeFinderOptions& options, const std::string& cache_key,
                                Communicator* communicator) {
  options.validate();
  BatchSizeSearch search;
  const fs::path cache_file = options.cache_file();
  if (device.is_cuda()) {
    size_t free_bytes = 0, total_bytes = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    search.capacity_mb = static_cast<double>(total_bytes) / kMiB;
  } else {
    search.capacity_mb = static_cast<double>(options.cpu_memory_limit_mb());
  }
  // The memory and margin are part of the question: another card or limit asks again.
  const std::string key = cache_key.empty() ? cache_key
                                            : c10::str(cache_key, "|memory ", static_cast<int64_t>(search.capacity_mb),
                                                       " MiB margin ", options.margin(), " max ", options.max(), " x", options.multiple_of());
  nlohmann::json cache = key.empty() ? nlohmann::json::object() : read_cache(cache_file);
  const bool cached = !key.empty() && cache.contains(key) && cache[key].is_number_integer() && cache[key].get<int64_t>() > 0;
  // Every rank must agree on whether to search (the search may hold collectives): cached only if cached on all.
  const bool all_cached = communicator && communicator->world_size() > 1 ? !communicator->any(!cached) : cached;

  int64_t answer = 0;
  if (all_cached) {
    answer = cache[key].get<int64_t>();
    search.from_cache = true;
  } else {
    const int64_t unit = options.multiple_of();
    const int64_t lowest = (options.start() + unit - 1) / unit;  // sizes are k x unit, k in [lowest, highest]
    const int64_t highest = options.max() / unit;
    auto fits = [&](int64_t k) {
      search.trials.push_back(run_trial(trial, device, k * unit, search.capacity_mb, options.margin()));
      return search.trials.back().fits;
    };
    if (!fits(lowest)) {
      throw TrainingError(c10::str("automatic batch size: even the smallest size, ", lowest * unit, ", does not fit (",
                                   search.trials.back().why, ")"));
    }
    int64_t good = lowest, bad = highest + 1;  // good fits; bad is the first known not to (or past max)
    while (good < highest) {  // doubling
      const int64_t next = std::min(good * 2, highest);
      if (!fits(next)) {
        bad = next;
        break;
      }
      good = next;
    }
    while (bad - good > 1) {  // bisection: `good` always holds a size that was tried and fitted
      const int64_t mid = good + (bad - good) / 2;
      if (fits(mid)) {
        good = mid;
      } else {
        bad = mid;
      }
    }
    answer = good * unit;
  }
  if (communicator && communicator->world_size() > 1) {  // the smallest rank's answer, as the max of negatives
    std::vector<torch::Tensor> value{torch::tensor({static_cast<double>(-answer)}, torch::kDouble).to(device)};
    communicator->all_reduce(value, ReduceOp::max);
    answer = static_cast<int64_t>(-value[0].cpu().item<double>());
  }
  search.batch_size = answer;
  if (!key.empty() && !cache_file.empty() && !search.from_cache && (!communicator || communicator->rank() == 0)) {
    cache[key] = answer;
    write_cache(cache_file, cache);
  }
  log::info(c10::str("automatic batch size: ", answer, search.from_cache ? " (cached)" : c10::str(" after ", search.trials.size(), " trials"),
                     search.capacity_mb > 0 ? c10::str(", memory ", static_cast<int64_t>(search.capacity_mb), " MiB, margin ",
                                                       options.margin())
                                            : ""));
  return search;
}

std::string batch_size_cache_key(const torch::nn::Module& module, const torch::Device& device, const std::string& precision,
                                 int64_t world_size, const std::string& probe) {
  std::string description;
  for (const auto& item : module.named_parameters()) {
    description += c10::str(item.key(), item.value().sizes(), item.value().scalar_type(), ';');
  }
  for (const auto& item : module.named_buffers()) {
    description += c10::str(item.key(), item.value().sizes(), item.value().scalar_type(), ';');
  }
  const std::string device_name = device.is_cuda() ? at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)->name
                                                   : std::string("cpu");
  return c10::str(module.name(), ":", std::hex, XXH3_64bits(description.data(), description.size()), std::dec, "|",
                  device_name, "|", precision, "|world ", world_size, "|", probe);
}

}  // namespace frugal
