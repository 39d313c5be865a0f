#include "distributed/detail/gradient_buckets.hpp"

#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <map>

namespace frugal::detail {

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> params, int64_t cap_bytes, Communicator& communicator,
                                 bool overlap)
    : params_(std::move(params)), slots_(params_.size()), communicator_(communicator), overlap_(overlap) {
  // Reverse order: the last layers' gradients come first in backward.
  std::map<std::pair<std::string, c10::ScalarType>, size_t> open;  // (device, dtype) -> bucket being filled
  std::vector<int64_t> bytes;
  for (size_t i = params_.size(); i-- > 0;) {
    const torch::Tensor& p = params_[i];
    const auto key = std::make_pair(p.device().str(), p.scalar_type());
    const int64_t size = p.numel() * static_cast<int64_t>(p.element_size());
    auto it = open.find(key);
    if (it == open.end() || (bytes[it->second] > 0 && bytes[it->second] + size > cap_bytes)) {
      buckets_.emplace_back();
      bytes.push_back(0);
      it = open.insert_or_assign(key, buckets_.size() - 1).first;
    }
    Bucket& bucket = buckets_[it->second];
    slots_[i] = Slot{it->second, bytes[it->second] / static_cast<int64_t>(p.element_size())};
    bucket.params.push_back(i);
    bytes[it->second] += size;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const torch::Tensor& first = params_[buckets_[b].params.front()];
    buckets_[b].flat = torch::zeros({bytes[b] / static_cast<int64_t>(first.element_size())}, first.options());
  }
  // The accumulator nodes are kept alive here: a leaf holds its own only weakly, and a new one
  // (without our hook) would be made for the next backward.
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    const uintptr_t key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(i);
          return outputs;
        }));
    hooks_.emplace_back(std::move(accumulator), key);
  }
}

GradientBuckets::~GradientBuckets() {
  for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
}

void GradientBuckets::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& slot : slots_) slot.ready = false;
  for (auto& bucket : buckets_) {
    bucket.waiting = bucket.params.size();
    bucket.pending.reset();
  }
  next_to_launch_ = 0;
  armed_ = true;
}

void GradientBuckets::on_gradient_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || !overlap_ || slots_[param].ready) return;
  copy_in(param);
  if (buckets_[slots_[param].bucket].waiting == 0) launch_ready_in_order();
}

void GradientBuckets::copy_in(size_t param) {
  Slot& slot = slots_[param];
  Bucket& bucket = buckets_[slot.bucket];
  torch::NoGradGuard no_grad;
  torch::Tensor target = bucket.flat.narrow(0, slot.offset, params_[param].numel());
  const torch::Tensor& grad = params_[param].grad();
  if (grad.defined()) {
    target.copy_(grad.reshape({-1}));
  } else {
    target.zero_();  // unused by this rank's forward pass: contributes nothing to the mean
  }
  slot.ready = true;
  --bucket.waiting;
}

void GradientBuckets::launch_ready_in_order() {
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].waiting == 0) {
    launch(buckets_[next_to_launch_++]);
  }
}

void GradientBuckets::launch(Bucket& bucket) {
  // Divided before the sum, as DistributedDataParallel does: the sum of means is the mean.
  bucket.flat.div_(static_cast<double>(communicator_.world_size()));
  bucket.pending = communicator_.start_all_reduce(bucket.flat);
}

void GradientBuckets::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  armed_ = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!slots_[i].ready) copy_in(i);
  }
  launch_ready_in_order();
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    bucket.pending->wait();
    bucket.pending.reset();
    for (size_t i : bucket.params) {
      torch::Tensor& p = params_[i];
      const torch::Tensor mean = bucket.flat.narrow(0, slots_[i].offset, p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(mean);
      } else if (mean.any().item<bool>()) {  // used on another rank
        p.mutable_grad() = mean.clone();
      }
    }
  }
}

}  // namespace frugal::detail
