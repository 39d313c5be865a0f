#pragma once
// Where a data loader reads next: saved in snapshots so that a resume reads on exactly there.

#include <cstdint>

namespace frugal {

struct DataPosition {
  int64_t epoch = 0;
  int64_t batch_index = 0;  // batches already handed out in this epoch
  int64_t seed = 0;
  int64_t batch_size = 0;   // the micro-batch batch_index counts in (0: not recorded)
};

}  // namespace frugal
