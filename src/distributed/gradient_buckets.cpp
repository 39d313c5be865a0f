#include "distributed/gradient_buckets.hpp"

#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "frugal/errors.hpp"

namespace frugal::detail {

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> params, int64_t cap_bytes, Communicator& communicator,
                                 bool overlap, BucketReduction reduction, int64_t alignment)
    : params_(std::move(params)),
      layout_(bucket_layout(params_, cap_bytes, reduction == BucketReduction::into_grads ? 1 : communicator.world_size(), alignment)),
      slots_(params_.size()),
      states_(layout_.size()),
      communicator_(communicator),
      overlap_(overlap),
      reduction_(reduction) {
  for (size_t b = 0; b < layout_.size(); ++b) {
    for (const auto& e : layout_[b].entries) slots_[e.param] = Slot{b, e.offset};
    const auto options = params_[layout_[b].entries.front().param].options();
    if (reduction_ == BucketReduction::scattered) {
      states_[b].chunk = torch::zeros({layout_[b].chunk()}, options);  // the flat bucket is made when needed
    } else {
      states_[b].flat = torch::zeros({layout_[b].padded}, options);
    }
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
  for (size_t b = 0; b < layout_.size(); ++b) {
    states_[b].waiting = layout_[b].entries.size();
    states_[b].pending.reset();
  }
  next_to_launch_ = 0;
  armed_ = true;
}

const torch::Tensor& GradientBuckets::reduced(size_t b) const {
  return reduction_ == BucketReduction::scattered ? states_.at(b).chunk : states_.at(b).flat;
}

std::vector<torch::Tensor> GradientBuckets::held() const {
  std::vector<torch::Tensor> out;
  for (const auto& s : states_) {
    if (s.flat.defined()) out.push_back(s.flat);
    if (s.chunk.defined()) out.push_back(s.chunk);
  }
  return out;
}

torch::Tensor& GradientBuckets::flat_of(size_t b) {
  State& state = states_[b];
  if (!state.flat.defined()) {
    const Bucket& bucket = layout_[b];
    state.flat = torch::empty({bucket.padded}, params_[bucket.entries.front().param].options());
    int64_t end = 0;  // the padding and any gaps between aligned entries add nothing
    for (const auto& e : bucket.entries) {
      if (e.offset > end) state.flat.narrow(0, end, e.offset - end).zero_();
      end = e.offset + e.numel;
    }
    state.flat.narrow(0, end, bucket.padded - end).zero_();
  }
  return state.flat;
}

void GradientBuckets::on_gradient_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || !overlap_) return;
  if (slots_[param].ready) {
    another_part(param);
    return;
  }
  copy_in(param);
  if (states_[slots_[param].bucket].waiting == 0) launch_ready_in_order();
}

void GradientBuckets::copy_in(size_t param) {
  Slot& slot = slots_[param];
  torch::NoGradGuard no_grad;
  torch::Tensor target = flat_of(slot.bucket).narrow(0, slot.offset, params_[param].numel());
  torch::Tensor& p = params_[param];
  if (p.grad().defined()) {
    target.copy_(p.grad().reshape({-1}));
    // With sharding the bucket is where the gradient lives from now on: the full-size .grad goes.
    if (reduction_ != BucketReduction::into_grads) p.mutable_grad().reset();
  } else {
    target.zero_();  // unused by this rank's forward pass: contributes nothing to the mean
  }
  slot.ready = true;
  --states_[slot.bucket].waiting;
}

void GradientBuckets::another_part(size_t param) {
  // A parameter whose accumulator ran twice in one backward (used by two activation-checkpointed
  // segments, each accumulating its own part): fine while its bucket waits, lost once it is sent.
  Slot& slot = slots_[param];
  torch::Tensor& p = params_[param];
  if (states_[slot.bucket].pending) {
    throw TrainingError(c10::str("data parallel: a second gradient for a parameter of shape ", p.sizes(),
                                 " arrived after its bucket was sent (a parameter used by several activation-checkpointed "
                                 "segments?): checkpoint them as one segment, or set distributed.overlap=false"));
  }
  if (!p.grad().defined()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor target = flat_of(slot.bucket).narrow(0, slot.offset, p.numel());
  if (reduction_ == BucketReduction::into_grads) {
    target.copy_(p.grad().reshape({-1}));  // .grad holds the sum so far
  } else {
    target.add_(p.grad().reshape({-1}));  // .grad was released after the first part: this is the new one
    p.mutable_grad().reset();
  }
}

void GradientBuckets::launch_ready_in_order() {
  while (next_to_launch_ < layout_.size() && states_[next_to_launch_].waiting == 0) launch(next_to_launch_++);
}

void GradientBuckets::launch(size_t b) {
  State& state = states_[b];
  torch::Tensor& flat = flat_of(b);
  // Divided before the sum, as DistributedDataParallel does: the sum of means is the mean.
  flat.div_(static_cast<double>(communicator_.world_size()));
  state.pending = reduction_ == BucketReduction::scattered ? communicator_.start_reduce_scatter(flat, state.chunk)
                                                           : communicator_.start_all_reduce(flat);
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
  for (size_t b = 0; b < layout_.size(); ++b) {
    State& state = states_[b];
    state.pending->wait();
    state.pending.reset();
    if (reduction_ == BucketReduction::scattered) {
      state.flat = torch::Tensor();  // only this rank's chunk is kept
      continue;
    }
    if (reduction_ != BucketReduction::into_grads) continue;
    for (const auto& e : layout_[b].entries) {
      torch::Tensor& p = params_[e.param];
      const torch::Tensor mean = state.flat.narrow(0, e.offset, e.numel).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(mean);
      } else if (mean.any().item<bool>()) {  // used on another rank
        p.mutable_grad() = mean.clone();
      }
    }
  }
}

}  // namespace frugal::detail
