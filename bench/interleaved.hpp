#pragma once
// Runs a baseline and a candidate alternately, round by round (alternating which goes first so
// neither always runs on a warmer machine), after one warm-up of each; reports medians.

#include <time.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace frugal::bench {

/// CPU time of the calling thread. The benchmarks run LibTorch on one thread, so this is the
/// work done, immune to the time a busy machine takes the core away (wall time is not).
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Comparison {
  double candidate = 0.0;  // median seconds per step
  double baseline = 0.0;
  double ratio = 0.0;      // median of the per-round ratios
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Each function runs one round and returns its seconds per step.
inline Comparison compare_interleaved(int rounds, const std::function<double()>& baseline,
                                      const std::function<double()>& candidate) {
  baseline();
  candidate();
  std::vector<double> b, c, r;
  for (int i = 0; i < rounds; ++i) {
    double tb = 0, tc = 0;
    if (i % 2 == 0) {
      tb = baseline();
      tc = candidate();
    } else {
      tc = candidate();
      tb = baseline();
    }
    b.push_back(tb);
    c.push_back(tc);
    r.push_back(tc / tb);
  }
  return {median(c), median(b), median(r)};
}

}  // namespace frugal::bench
