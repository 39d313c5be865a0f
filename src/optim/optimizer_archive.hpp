#pragma once
// An optimizer's state serialized the way torch::optim::Optimizer::save writes it, except that
// each parameter is keyed by its position (1, 2, ... across the groups) instead of its tensor's
// address, and the state is written in parameter order: two identical runs write identical
// bytes. Optimizer::load reads it unchanged (it maps keys to parameters by position).
#include <torch/optim/optimizer.h>

#include <functional>
#include <string>

namespace frugal::detail {

/// Whether `optimizer` is one of LibTorch's own (or derives from one): it saves and loads its
/// state in LibTorch's layout, keyed as torch::optim::serialize keys it.
bool saves_like_libtorch(const torch::optim::Optimizer& optimizer);

/// The optimizer's archive bytes, deterministic for LibTorch's own optimizers (SGD, Adam, AdamW,
/// RMSprop, Adagrad, LBFGS and their subclasses); any other optimizer's own save().
std::string optimizer_archive_bytes(const torch::optim::Optimizer& optimizer);
/// The same bytes, handed to `writer` as they are made (a checkpoint file, without a copy in memory).
void write_optimizer_archive(const torch::optim::Optimizer& optimizer, const std::function<size_t(const void*, size_t)>& writer);

}  // namespace frugal::detail
