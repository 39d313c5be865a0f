#include "frugal/base/retention.hpp"

#include <algorithm>
#include <cmath>

namespace frugal {

Retained retain(const std::vector<RetentionCandidate>& candidates, const RetentionRule& rule) {
  Retained out;
  const size_t n = candidates.size();
  const size_t last = rule.keep_last <= 0 ? n : std::min(n, static_cast<size_t>(rule.keep_last));
  for (size_t i = n - last; i < n; ++i) out.newest.insert(candidates[i].name);
  if (rule.keep_best > 0) {
    std::vector<const RetentionCandidate*> scored;
    for (const auto& c : candidates) {
      if (c.score && std::isfinite(*c.score)) scored.push_back(&c);
    }
    // Stable: of equal scores the older checkpoint ranks first, as it reached the value first.
    std::stable_sort(scored.begin(), scored.end(),
                     [&](const RetentionCandidate* a, const RetentionCandidate* b) { return better(rule.mode, *a->score, *b->score); });
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(rule.keep_best); ++i) out.best.insert(scored[i]->name);
  }
  return out;
}

}  // namespace frugal
