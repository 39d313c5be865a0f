#include "frugal/distributed/agreement.hpp"

#include <c10/util/StringUtil.h>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include "frugal/errors.hpp"

namespace frugal {
namespace {

// FNV-1a: the same on every build, so ranks running different binaries still compare.
std::string digest_of(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::map<std::string, std::string> parse_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('\t');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

// "ranks 0, 2 and 3" / "rank 1"
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

const std::set<std::string>& per_rank_options() {
  static const std::set<std::string> keys{
      "trainer.device",          "trainer.cpu_memory_cache", "data.num_workers",       "data.prefetch_batches",
      "distributed.log_all_ranks", "progress.enabled",       "progress.refresh_seconds", "progress.log_every_seconds",
      "profiler.dir",            "auto_batch.cache_file",    "throughput.nvml"};
  return keys;
}

void check_ranks_agree(Communicator& communicator, const std::map<std::string, std::string>& values,
                       const std::set<std::string>& per_rank) {
  if (communicator.world_size() < 2) return;
  std::string text;
  for (const auto& [key, value] : values) {
    if (per_rank_options().count(key) || per_rank.count(key)) continue;
    text += key + '\t' + value + '\n';
  }
  const std::vector<std::string> digests = communicator.all_gather_text(digest_of(text));
  bool same = true;
  for (const auto& d : digests) same = same && d == digests.front();
  if (same) return;
  // They differ: gather the values themselves, so every rank can say which key and how.
  const std::vector<std::string> texts = communicator.all_gather_text(text);
  std::vector<std::map<std::string, std::string>> all;
  std::set<std::string> keys;
  for (const auto& t : texts) {
    all.push_back(parse_lines(t));
    for (const auto& [key, value] : all.back()) keys.insert(key);
  }
  for (const auto& key : keys) {
    std::map<std::string, std::vector<int64_t>> ranks_of;  // value -> ranks holding it
    std::vector<std::string> order;
    for (size_t r = 0; r < all.size(); ++r) {
      const auto found = all[r].find(key);
      const std::string value = found == all[r].end() ? "(not set)" : found->second;
      if (!ranks_of.count(value)) order.push_back(value);
      ranks_of[value].push_back(static_cast<int64_t>(r));
    }
    if (ranks_of.size() < 2) continue;
    std::string how;
    for (size_t i = 0; i < order.size(); ++i) {
      how += (i == 0 ? "" : i + 1 == order.size() ? " and " : ", ") + order[i] + " on " + ranks_text(ranks_of[order[i]]);
    }
    // The keys allowed to differ, from the same list the comparison skips (and the program's own).
    std::string allowed;
    for (const auto& k : per_rank_options()) allowed += (allowed.empty() ? "" : ", ") + k;
    for (const auto& k : per_rank) allowed += ", " + k;
    throw ConfigError(c10::str("the ranks were started with different settings: '", key, "' is ", how,
                               ". Every rank must resolve the same configuration (file, FRUGAL_* environment, command line) and "
                               "read the same data; only these may differ: ", allowed, ". Nothing was trained or written."));
  }
  throw ConfigError("the ranks' configurations differ, but no single key explains it (the digest differs): refusing to start");
}

}  // namespace frugal
