#include "optim/optimizer_archive.hpp"

#include <torch/optim.h>
#include <torch/serialize/output-archive.h>

#include <unordered_map>

#include "base/host_memory.hpp"

namespace frugal::detail {
// LibTorch's optimizers all save through torch::optim::serialize<State, Options>, whose layout
// this mirrors; a user's optimizer may save anything, so it keeps its own save().
bool saves_like_libtorch(const torch::optim::Optimizer& o) {
  using namespace torch::optim;
  return dynamic_cast<const SGD*>(&o) || dynamic_cast<const Adam*>(&o) || dynamic_cast<const AdamW*>(&o) ||
         dynamic_cast<const RMSprop*>(&o) || dynamic_cast<const Adagrad*>(&o) || dynamic_cast<const LBFGS*>(&o);
}

namespace {

// The optimizer's archive as optimizer_archive_bytes describes it.
torch::serialize::OutputArchive archive_of(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive root;
  if (!saves_like_libtorch(optimizer)) {
    optimizer.save(root);
    return root;
  }
  // Positions as keys; load() parses a key as an integer, so they are decimal numbers.
  std::unordered_map<const void*, std::string> key_of;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) key_of.emplace(p.unsafeGetTensorImpl(), std::to_string(key_of.size() + 1));
  }
  root.write("pytorch_version", c10::IValue("1.5.0"));
  torch::serialize::OutputArchive state_archive(root.compilation_unit());
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto found = optimizer.state().find(p.unsafeGetTensorImpl());
      if (found == optimizer.state().end()) continue;
      torch::serialize::OutputArchive entry(root.compilation_unit());
      found->second->serialize(entry);
      state_archive.write(key_of.at(p.unsafeGetTensorImpl()), entry);
    }
  }
  root.write("state", state_archive);
  torch::serialize::OutputArchive groups_archive(root.compilation_unit());
  const auto& groups = optimizer.param_groups();
  groups_archive.write("param_groups/size", torch::tensor(static_cast<int64_t>(groups.size())));
  for (size_t g = 0; g < groups.size(); ++g) {
    torch::serialize::OutputArchive group(root.compilation_unit());
    const auto& params = groups[g].params();
    group.write("params/size", torch::tensor(static_cast<int64_t>(params.size())));
    for (size_t j = 0; j < params.size(); ++j) {
      group.write("params/" + std::to_string(j), c10::IValue(key_of.at(params[j].unsafeGetTensorImpl())));
    }
    torch::serialize::OutputArchive options(root.compilation_unit());
    groups[g].options().serialize(options);
    group.write("options", options);
    groups_archive.write("param_groups/" + std::to_string(g), group);
  }
  root.write("param_groups", groups_archive);
  return root;
}

}  // namespace

std::string optimizer_archive_bytes(const torch::optim::Optimizer& optimizer) {
  auto root = archive_of(optimizer);
  return archive_bytes(root);
}

void write_optimizer_archive(const torch::optim::Optimizer& optimizer, const std::function<size_t(const void*, size_t)>& writer) {
  archive_of(optimizer).save_to(writer);
}

}  // namespace frugal::detail
