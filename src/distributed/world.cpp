#include "frugal/distributed/world.hpp"

#include <charconv>
#include <map>
#include <optional>

#include "frugal/errors.hpp"

namespace frugal {
namespace {

using Env = std::map<std::string, std::string>;

Env to_map(const std::vector<std::string>& environment) {
  Env env;
  for (const auto& assignment : environment) {
    const auto eq = assignment.find('=');
    if (eq != std::string::npos) env[assignment.substr(0, eq)] = assignment.substr(eq + 1);
  }
  return env;
}

std::optional<std::string> get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
}

int64_t integer(const Env& env, const std::string& name, std::optional<int64_t> fallback = std::nullopt) {
  auto text = get(env, name);
  if (!text) {
    if (fallback) return *fallback;
    throw OptionError(name, "environment variable " + name + " is not set");
  }
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || ptr != text->data() + text->size() || text->empty()) {
    throw OptionError(name, "environment variable " + name + " must be an integer, got '" + *text + "'");
  }
  return value;
}

void check(const World& w, const std::string& rank_var, const std::string& size_var) {
  if (w.world_size < 1) throw OptionError(size_var, size_var + " must be >= 1, got " + std::to_string(w.world_size));
  if (w.rank < 0 || w.rank >= w.world_size) {
    throw OptionError(rank_var, rank_var + " must be in [0, " + std::to_string(w.world_size) + "), got " +
                                    std::to_string(w.rank));
  }
  if (w.master_port < 1 || w.master_port > 65535) {
    throw OptionError("MASTER_PORT", "MASTER_PORT must be in [1, 65535], got " + std::to_string(w.master_port));
  }
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string first = nodelist.substr(0, end);
  const auto open = first.find('[');
  if (open == std::string::npos) return first;
  // "gpu[03-05,9]": the prefix, then the first number of the range (keeping its zero padding).
  const std::string inside = first.substr(open + 1, first.find(']') - open - 1);
  const auto cut = inside.find_first_of("-,");
  return first.substr(0, open) + inside.substr(0, cut);
}

World detect_world(const std::vector<std::string>& environment) {
  const Env env = to_map(environment);
  World w;
  if (get(env, "RANK") || get(env, "WORLD_SIZE")) {
    w.launcher = "torchrun";
    w.rank = integer(env, "RANK");
    w.world_size = integer(env, "WORLD_SIZE");
    w.local_rank = integer(env, "LOCAL_RANK", w.rank);
    w.master_addr = get(env, "MASTER_ADDR").value_or("127.0.0.1");
    w.master_port = integer(env, "MASTER_PORT", 29500);
    w.agent_store = get(env, "TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    check(w, "RANK", "WORLD_SIZE");
  } else if (get(env, "SLURM_PROCID")) {
    w.launcher = "slurm";
    w.rank = integer(env, "SLURM_PROCID");
    w.world_size = integer(env, "SLURM_NTASKS");
    w.local_rank = integer(env, "SLURM_LOCALID", 0);
    const auto nodes = get(env, "SLURM_STEP_NODELIST") ? get(env, "SLURM_STEP_NODELIST") : get(env, "SLURM_JOB_NODELIST");
    if (!nodes) throw OptionError("SLURM_JOB_NODELIST", "Slurm job without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST");
    w.master_addr = get(env, "MASTER_ADDR").value_or(first_slurm_host(*nodes));
    w.master_port = integer(env, "MASTER_PORT", 29500);
    check(w, "SLURM_PROCID", "SLURM_NTASKS");
  }
  return w;
}

}  // namespace frugal
