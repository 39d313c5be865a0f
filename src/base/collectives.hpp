#pragma once
// Pieces every Communicator implementation shares: a collective already done, one followed by
// host work, the chunk-size check of reduce-scatter and all-gather, and text gathered by sums.

#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frugal/base/communicator.hpp"

namespace frugal::detail {

struct CompletedCollective : PendingCollective {
  void wait() override {}
};

// A collective followed by host-side work once it is done (a default reduce-scatter's copy).
class ThenPending : public PendingCollective {
 public:
  ThenPending(std::unique_ptr<PendingCollective> first, std::function<void()> then) : first_(std::move(first)), then_(std::move(then)) {}
  void wait() override {
    if (!first_) return;
    first_->wait();
    first_.reset();
    then_();
  }

 private:
  std::unique_ptr<PendingCollective> first_;
  std::function<void()> then_;
};

/// CommunicationError unless `whole` is `world_size` contiguous chunks the size of `chunk`.
void check_chunks(const char* what, const torch::Tensor& whole, const torch::Tensor& chunk, int64_t world_size);

/// Every rank's text, in rank order, through two calls of `sum` (an all-reduce on `device`).
std::vector<std::string> gather_text_by_sums(const std::string& mine, int64_t rank, int64_t world, const torch::Device& device,
                                             const std::function<void(torch::Tensor&)>& sum);

}  // namespace frugal::detail
