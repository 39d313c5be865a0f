#include "frugal/base/communicator.hpp"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "base/collectives.hpp"

namespace frugal {

namespace detail {

void check_chunks(const char* what, const torch::Tensor& whole, const torch::Tensor& chunk, int64_t world_size) {
  if (whole.numel() != chunk.numel() * world_size || !whole.is_contiguous() || !chunk.is_contiguous()) {
    throw CommunicationError(c10::str(what, ": the whole buffer (", whole.numel(), " elements) must be ", world_size,
                                      " contiguous chunks of ", chunk.numel()));
  }
}

// Every rank's text through two sums: the lengths, then the bytes (as int32: gloo and NCCL both
// sum those), each rank filling its own slot with zeros elsewhere.
std::vector<std::string> gather_text_by_sums(const std::string& mine, int64_t rank, int64_t world, const torch::Device& device,
                                             const std::function<void(torch::Tensor&)>& sum) {
  const auto on = torch::TensorOptions().device(device);
  torch::Tensor lengths = torch::zeros({world}, on.dtype(torch::kLong));
  lengths[rank] = static_cast<int64_t>(mine.size());
  sum(lengths);
  const torch::Tensor host_lengths = lengths.cpu();
  std::vector<int64_t> begin(static_cast<size_t>(world) + 1, 0);
  for (int64_t r = 0; r < world; ++r) begin[static_cast<size_t>(r) + 1] = begin[static_cast<size_t>(r)] + host_lengths[r].item<int64_t>();
  torch::Tensor mine_bytes = torch::empty({static_cast<int64_t>(mine.size())}, torch::kInt);
  for (size_t i = 0; i < mine.size(); ++i) mine_bytes[static_cast<int64_t>(i)] = static_cast<unsigned char>(mine[i]);
  torch::Tensor bytes = torch::zeros({begin.back()}, on.dtype(torch::kInt));
  bytes.narrow(0, begin[static_cast<size_t>(rank)], static_cast<int64_t>(mine.size())).copy_(mine_bytes);
  sum(bytes);
  const torch::Tensor all = bytes.cpu();
  const int* data = all.data_ptr<int>();
  std::vector<std::string> out;
  for (int64_t r = 0; r < world; ++r) {
    std::string text;
    for (int64_t i = begin[static_cast<size_t>(r)]; i < begin[static_cast<size_t>(r) + 1]; ++i) text += static_cast<char>(data[i]);
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace detail

using detail::CompletedCollective;
using detail::ThenPending;
using detail::check_chunks;
using detail::gather_text_by_sums;

std::unique_ptr<PendingCollective> SingleProcessCommunicator::start_all_reduce(torch::Tensor, ReduceOp) {
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> SingleProcessCommunicator::start_reduce_scatter(torch::Tensor input, torch::Tensor output) {
  check_chunks("reduce_scatter", input, output, 1);
  if (input.data_ptr() != output.data_ptr()) output.copy_(input);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> SingleProcessCommunicator::start_all_gather(torch::Tensor input, torch::Tensor output) {
  check_chunks("all_gather", output, input, 1);
  if (input.data_ptr() != output.data_ptr()) output.copy_(input);
  return std::make_unique<CompletedCollective>();
}

std::vector<std::string> Communicator::all_gather_text(const std::string& mine) {
  return gather_text_by_sums(mine, rank(), world_size(), torch::kCPU, [this](torch::Tensor& t) {
    std::vector<torch::Tensor> one{t};
    all_reduce(one, ReduceOp::sum);
  });
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter(torch::Tensor input, torch::Tensor output) {
  check_chunks("reduce_scatter", input, output, world_size());
  auto pending = start_all_reduce(input);
  const torch::Tensor mine = input.narrow(0, rank() * output.numel(), output.numel());
  return std::make_unique<ThenPending>(std::move(pending), [mine, output]() mutable { output.copy_(mine); });
}

std::unique_ptr<PendingCollective> Communicator::start_all_gather(torch::Tensor input, torch::Tensor output) {
  check_chunks("all_gather", output, input, world_size());
  output.zero_();
  output.narrow(0, rank() * input.numel(), input.numel()).copy_(input);
  return start_all_reduce(output);
}

}  // namespace frugal
