#pragma once
// A Communicator that forwards to another and counts the collectives started through it, so a
// test can tell which micro-steps communicated.

#include <atomic>
#include <memory>

#include "frugal/distributed/communicator.hpp"

namespace frugal::testing {

class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int64_t rank() const override { return inner_->rank(); }
  int64_t world_size() const override { return inner_->world_size(); }
  std::string backend() const override { return inner_->backend(); }
  void all_reduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override {
    ++count_;
    inner_->all_reduce(tensors, op);
  }
  std::unique_ptr<PendingCollective> start_all_reduce(torch::Tensor flat, ReduceOp op) override {
    ++count_;
    return inner_->start_all_reduce(std::move(flat), op);
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter(torch::Tensor input, torch::Tensor output) override {
    ++count_;
    return inner_->start_reduce_scatter(std::move(input), std::move(output));
  }
  std::unique_ptr<PendingCollective> start_all_gather(torch::Tensor input, torch::Tensor output) override {
    ++count_;
    return inner_->start_all_gather(std::move(input), std::move(output));
  }
  void broadcast(std::vector<torch::Tensor>& tensors, int64_t root) override {
    ++count_;
    inner_->broadcast(tensors, root);
  }
  void barrier() override {
    ++count_;
    inner_->barrier();
  }
  bool any(bool local) override {
    ++count_;
    return inner_->any(local);
  }
  int64_t collectives() const { return count_; }

 private:
  std::shared_ptr<Communicator> inner_;
  std::atomic<int64_t> count_{0};
};

}  // namespace frugal::testing
