#include "bench_result.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

namespace frugal::bench {

void append(const std::string& path, const Result& r) {
  nlohmann::ordered_json line{{"name", r.name}, {"value", r.value}, {"unit", r.unit},
                              {"baseline", r.baseline}, {"ratio", r.ratio()}, {"command", r.command}};
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::app) << line.dump() << '\n';
  std::cout << line.dump() << '\n';
}

}  // namespace frugal::bench
