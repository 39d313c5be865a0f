#include "optim/portable_state.hpp"

#include <c10/util/StringUtil.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/torch.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "frugal/errors.hpp"
#include "frugal/optim/state_quantization.hpp"
#include "optim/quantized_param_state.hpp"

namespace frugal::detail {
namespace {

// A jit module's own attribute, present in every archive: not data.
bool is_data_key(const std::string& key) { return key != "training"; }

std::map<std::string, c10::IValue> read_entries(torch::serialize::InputArchive& archive) {
  std::map<std::string, c10::IValue> out;
  for (const auto& key : archive.keys()) {
    if (!is_data_key(key)) continue;
    c10::IValue value;
    archive.read(key, value);
    out.emplace(key, std::move(value));
  }
  return out;
}

void write_entries(torch::serialize::OutputArchive& archive, const std::map<std::string, c10::IValue>& entries) {
  for (const auto& [key, value] : entries) archive.write(key, value);
}

bool per_element(const c10::IValue& value, int64_t numel) {
  return value.isTensor() && value.toTensor().dim() > 0 && value.toTensor().numel() == numel;
}

std::string key_of(const torch::Tensor& t) { return std::to_string(reinterpret_cast<size_t>(t.unsafeGetTensorImpl())); }

}  // namespace

void PortableOptimizerState::add_serialized(const std::string& bytes, const GroupSlots& slots, const std::string& source) {
  try {
    std::istringstream stream(bytes);
    torch::serialize::InputArchive root;
    root.load_from(stream, torch::Device(torch::kCPU));
    torch::serialize::InputArchive state_archive, groups_archive;
    root.read("state", state_archive);
    root.read("param_groups", groups_archive);
    torch::Tensor size;
    groups_archive.read("param_groups/size", size);
    const int64_t groups = size.item<int64_t>();
    if (groups != static_cast<int64_t>(slots.size())) {
      throw CheckpointError(c10::str(source, ": the optimizer has ", groups, " parameter groups but this run's has ", slots.size(),
                                     " (a different optimizer or weight-decay split?)"));
    }
    const bool first = group_options.empty();
    for (int64_t g = 0; g < groups; ++g) {
      torch::serialize::InputArchive group;
      groups_archive.read(c10::str("param_groups/", g), group);
      torch::Tensor count;
      group.read("params/size", count);
      if (count.item<int64_t>() != static_cast<int64_t>(slots[g].size())) {
        throw CheckpointError(c10::str(source, ": parameter group ", g, " holds ", count.item<int64_t>(), " tensors but this run's ",
                                       slots[g].size(), " (the model or the sharding differs from what the checkpoint says)"));
      }
      if (first) {
        torch::serialize::InputArchive options;
        group.read("options", options);
        group_options.push_back(read_entries(options));
      }
      for (size_t j = 0; j < slots[g].size(); ++j) {
        c10::IValue key;
        group.read(c10::str("params/", j), key);
        const ParamSlot& slot = slots[g][j];
        group_of[slot.name] = g;
        StatePiece piece{slot.begin, slot.numel, {}};
        torch::serialize::InputArchive entries;
        if (state_archive.try_read(key.toStringRef(), entries)) {
          for (auto& [name, value] : read_entries(entries)) {
            if (per_element(value, slot.numel)) value = value.toTensor().reshape({-1}).contiguous();
            piece.entries.emplace(name, std::move(value));
          }
        }
        auto& pieces = params[slot.name];
        pieces.push_back(std::move(piece));
        std::sort(pieces.begin(), pieces.end(), [](const StatePiece& a, const StatePiece& b) { return a.begin < b.begin; });
      }
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(c10::str(source, ": unreadable optimizer state: ", message_of(e)));
  }
}

void PortableOptimizerState::load_into(torch::optim::Optimizer& optimizer, const GroupSlots& slots, const c10::Device& device,
                                       const std::string& source) const {
  auto& groups = optimizer.param_groups();
  const auto* quantizing = quantized_states_of(optimizer);
  const bool keep_8bit = quantizing != nullptr && quantizing->state_quantization().bits() == 8;
  if (groups.size() != slots.size()) {
    throw CheckpointError(c10::str(source, ": ", slots.size(), " parameter groups expected, the optimizer has ", groups.size()));
  }
  if (!group_options.empty() && group_options.size() != groups.size()) {
    throw CheckpointError(c10::str(source, ": the checkpoint's optimizer has ", group_options.size(), " parameter groups but this run's has ",
                                   groups.size(), " (a different optimizer or weight-decay split?)"));
  }
  torch::serialize::OutputArchive root;
  root.write("pytorch_version", c10::IValue("1.5.0"));
  torch::serialize::OutputArchive state_archive(root.compilation_unit()), groups_archive(root.compilation_unit());
  groups_archive.write("param_groups/size", torch::tensor(static_cast<int64_t>(groups.size())));
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& tensors = groups[g].params();
    if (tensors.size() != slots[g].size()) {
      throw CheckpointError(c10::str(source, ": parameter group ", g, " has ", tensors.size(), " tensors, ", slots[g].size(), " expected"));
    }
    torch::serialize::OutputArchive group(root.compilation_unit());
    group.write("params/size", torch::tensor(static_cast<int64_t>(tensors.size())));
    for (size_t j = 0; j < tensors.size(); ++j) {
      const ParamSlot& slot = slots[g][j];
      const torch::Tensor& target = tensors[j];
      group.write(c10::str("params/", j), c10::IValue(key_of(target)));
      const auto found = params.find(slot.name);
      if (found == params.end()) continue;  // no state for this parameter: it starts fresh
      if (const auto saved = group_of.find(slot.name); saved != group_of.end() && saved->second != static_cast<int64_t>(g)) {
        throw CheckpointError(c10::str(source, ": '", slot.name, "' was in parameter group ", saved->second, " of the checkpoint's optimizer, ",
                                       "it is in group ", g, " now (a different weight-decay split?)"));
      }
      // The pieces that overlap the slot's range, and what they hold.
      std::map<std::string, c10::IValue> entries;
      int64_t covered = 0, with_state = 0, overlapping = 0;
      std::map<std::string, torch::Tensor> flat;  // per-element entries, assembled
      std::map<std::string, torch::Tensor> blocks;  // per-block entries (8-bit states' maxima), assembled
      for (const StatePiece& piece : found->second) {
        const int64_t begin = std::max(slot.begin, piece.begin), end = std::min(slot.begin + slot.numel, piece.begin + piece.numel);
        if (begin >= end) continue;
        ++overlapping;
        covered += end - begin;
        if (piece.entries.empty()) continue;
        ++with_state;
        // 8-bit moments for an optimizer that keeps fp32 states: their values, which any layout can slice.
        const auto piece_entries = keep_8bit ? piece.entries : with_fp32_moments(piece.entries);
        for (const auto& [name, value] : piece_entries) {
          if (is_block_maxima_key(name) && value.isTensor()) {
            // Blocks are the parameter's: a piece starts on a block, so its blocks are whole ones.
            if ((begin - piece.begin) % kQuantizationBlock != 0 || (begin - slot.begin) % kQuantizationBlock != 0) {
              throw CheckpointError(c10::str(source, ": the 8-bit optimizer state of '", slot.name, "' is split at element ", begin,
                                             ", not at a block of ", kQuantizationBlock, ": its pieces cannot be joined"));
            }
            auto [it, fresh] = blocks.try_emplace(name);
            if (fresh) it->second = torch::empty({detail::blocks_of(slot.numel)}, value.toTensor().options());
            const torch::Tensor source_blocks = value.toTensor().reshape({-1});
            const int64_t first = (begin - piece.begin) / kQuantizationBlock, count = detail::blocks_of(end - begin);
            if (first + count > source_blocks.numel()) {
              throw CheckpointError(c10::str(source, ": the 8-bit optimizer state of '", slot.name, "' has ", source_blocks.numel(),
                                             " block maxima for ", piece.numel, " elements"));
            }
            it->second.narrow(0, (begin - slot.begin) / kQuantizationBlock, count).copy_(source_blocks.narrow(0, first, count));
          } else if (per_element(value, piece.numel)) {
            auto [it, fresh] = flat.try_emplace(name);
            if (fresh) it->second = torch::empty({slot.numel}, value.toTensor().options());
            it->second.narrow(0, begin - slot.begin, end - begin).copy_(value.toTensor().narrow(0, begin - piece.begin, end - begin));
          } else if (auto [it, fresh] = entries.try_emplace(name, value); !fresh && !(it->second == value)) {
            throw CheckpointError(c10::str(source, ": the pieces of '", slot.name, "' disagree on the optimizer's '", name, "'"));
          }
        }
      }
      if (with_state == 0) continue;
      if (with_state != overlapping || covered != slot.numel) {
        throw CheckpointError(c10::str(source, ": optimizer state covers only part of elements [", slot.begin, ", ",
                                       slot.begin + slot.numel, ") of '", slot.name, "'"));
      }
      for (auto& [name, values] : blocks) entries[name] = values;
      for (auto& [name, values] : flat) {
        torch::Tensor shaped = torch::empty_like(target, values.options().device(torch::kCPU));  // the tensor's layout (channels-last...)
        shaped.copy_(values.view(target.sizes()));
        entries[name] = shaped;
      }
      torch::serialize::OutputArchive entry_archive(root.compilation_unit());
      write_entries(entry_archive, entries);
      state_archive.write(key_of(target), entry_archive);
    }
    torch::serialize::OutputArchive options(root.compilation_unit());
    if (g < group_options.size()) {
      write_entries(options, group_options[g]);
    } else {
      groups[g].options().serialize(options);
    }
    group.write("options", options);
    groups_archive.write(c10::str("param_groups/", g), group);
  }
  root.write("state", state_archive);
  root.write("param_groups", groups_archive);
  std::ostringstream bytes;
  root.save_to(bytes);
  std::istringstream in(bytes.str());
  torch::serialize::InputArchive archive;
  archive.load_from(in, device);
  try {
    optimizer.load(archive);
  } catch (const std::exception& e) {
    throw CheckpointError(c10::str(source, ": the optimizer refused the state: ", message_of(e)));
  }
}

GroupSlots slots_of(const std::vector<ShardPieceInfo>& pieces, size_t groups) {
  GroupSlots slots(groups);
  for (const auto& p : pieces) {
    if (p.group < 0 || static_cast<size_t>(p.group) >= groups) {
      throw CheckpointError(c10::str("a shard piece of '", p.param, "' belongs to parameter group ", p.group, " of ", groups));
    }
    auto& group = slots[static_cast<size_t>(p.group)];
    if (group.size() <= static_cast<size_t>(p.index)) group.resize(static_cast<size_t>(p.index) + 1);
    group[static_cast<size_t>(p.index)] = {p.param, p.begin, p.numel, {p.numel}};
  }
  for (size_t g = 0; g < groups; ++g) {
    for (size_t j = 0; j < slots[g].size(); ++j) {
      if (slots[g][j].name.empty()) throw CheckpointError(c10::str("the shard layout has no piece at index ", j, " of group ", g));
    }
  }
  return slots;
}

GroupSlots whole_parameter_slots(const torch::optim::Optimizer& optimizer, const torch::nn::Module& module) {
  std::unordered_map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& p : module.named_parameters()) name_of.emplace(p.value().unsafeGetTensorImpl(), p.key());
  GroupSlots slots;
  for (const auto& group : optimizer.param_groups()) {
    auto& out = slots.emplace_back();
    for (const auto& t : group.params()) {
      const auto it = name_of.find(t.unsafeGetTensorImpl());
      if (it == name_of.end()) {
        throw CheckpointError(c10::str("the optimizer updates a tensor of shape ", t.sizes(),
                                       " that is not a parameter of the model: its state cannot be named in a checkpoint"));
      }
      out.push_back({it->second, 0, t.numel(), t.sizes().vec()});
    }
  }
  return slots;
}

}  // namespace frugal::detail
