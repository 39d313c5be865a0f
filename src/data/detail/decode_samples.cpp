#include "data/detail/decode_samples.hpp"

#include <c10/util/StringUtil.h>

#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal::detail {

Batch decode_samples(const std::vector<int64_t>& indices, const std::function<Sample(int64_t)>& read,
                     const SampleDecoder& decode, const FetchContext& context, OnCorrupt on_corrupt,
                     std::atomic<int64_t>& skipped) {
  std::vector<Batch> examples;
  examples.reserve(indices.size());
  std::string last_error;
  for (const int64_t index : indices) {
    try {
      examples.push_back(decode(read(index), SampleContext{index, context.epoch, context.seed}));
    } catch (const DataError& e) {
      if (on_corrupt == OnCorrupt::error) throw;
      ++skipped;
      last_error = e.what();
      log::warn(c10::str("skipping a corrupt sample (data.on_corrupt = skip): ", e.what()));
    }
  }
  if (examples.empty()) throw DataError("batch", -1, "every sample of the batch was corrupt; the last: " + last_error);
  return collate_into(examples, context.buffers.get(), context.pinned);
}

}  // namespace frugal::detail
