// The checkpoint node: a custom autograd function whose forward runs the segment without a graph
// and whose backward runs it again with one, under the forward's random and autocast state, then
// differentiates it with a nested backward (as torch.utils.checkpoint's reentrant variant does):
// the parameters' gradients are accumulated into .grad by that nested pass, each as soon as it is
// ready, so no layer's worth of parameter gradients is held at once.
#include "frugal/memory/activation_checkpoint.hpp"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <set>
#include <unordered_set>

#include "frugal/errors.hpp"
#include "frugal/log.hpp"

namespace frugal {
namespace {

using torch::autograd::variable_list;

// The generators a segment may draw from: the CPU's and those of the CUDA devices it touches.
struct RngState {
  std::vector<std::pair<at::Generator, torch::Tensor>> states;

  static RngState capture(const std::set<c10::DeviceIndex>& cuda_devices) {
    RngState s;
    auto take = [&s](at::Generator generator) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      torch::Tensor state = generator.get_state();
      s.states.emplace_back(std::move(generator), std::move(state));
    };
    take(at::detail::getDefaultCPUGenerator());
    for (const c10::DeviceIndex i : cuda_devices) take(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i)));
    return s;
  }
  void restore() const {
    for (const auto& [generator, state] : states) {
      at::Generator g = generator;
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(state);
    }
  }
};

constexpr c10::DeviceType kAutocastDevices[] = {c10::DeviceType::CPU, c10::DeviceType::CUDA};

// Autocast is thread-local and backward may run on another thread (CUDA's device threads), so the
// forward's state is carried over explicitly.
struct AutocastState {
  struct Device {
    c10::DeviceType type;
    bool enabled;
    c10::ScalarType dtype;
  };
  std::vector<Device> devices;
  bool cache_enabled = true;

  static AutocastState capture() {
    AutocastState s;
    for (const auto type : kAutocastDevices) {
      s.devices.push_back({type, at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)});
    }
    s.cache_enabled = at::autocast::is_autocast_cache_enabled();
    return s;
  }
  void apply() const {
    for (const auto& d : devices) {
      at::autocast::set_autocast_enabled(d.type, d.enabled);
      at::autocast::set_autocast_dtype(d.type, d.dtype);
    }
    at::autocast::set_autocast_cache_enabled(cache_enabled);
  }
};

// The forward's autocast state for the length of a recomputation. Weight casts cached during it
// are dropped at its end: a cache left behind would hand the next forward pass casts of weights
// the optimizer has changed since.
class AutocastAs {
 public:
  explicit AutocastAs(const AutocastState& state) : previous_(AutocastState::capture()) {
    state.apply();
    at::autocast::increment_nesting();
  }
  ~AutocastAs() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }
  AutocastAs(const AutocastAs&) = delete;
  AutocastAs& operator=(const AutocastAs&) = delete;

 private:
  AutocastState previous_;
};

// A saved input kept in pinned host memory until backward.
struct OffloadedInput {
  torch::Tensor host;
  std::shared_ptr<at::cuda::CUDAEvent> copied;  // recorded on the side stream after the copy
  c10::Device device;
};

c10::cuda::CUDAStream side_stream(c10::DeviceIndex index) {
  thread_local std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  auto it = streams.find(index);
  if (it == streams.end()) it = streams.emplace(index, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)).first;
  return it->second;
}

OffloadedInput offload(const torch::Tensor& x) {
  const c10::DeviceIndex index = x.device().index();
  c10::cuda::CUDAGuard device_guard(index);
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
  const c10::cuda::CUDAStream side = side_stream(index);
  OffloadedInput out{torch::empty_like(x, x.options().device(torch::kCPU).pinned_memory(true)),
                     std::make_shared<at::cuda::CUDAEvent>(), x.device()};
  at::cuda::CUDAEvent produced;
  produced.record(current);
  produced.block(side);  // the side stream copies x only once x has been written
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    out.host.copy_(x, /*non_blocking=*/true);
    out.copied->record(side);
  }
  x.record_stream(side.unwrap());  // x's memory is not reused before the copy has read it
  return out;
}

torch::Tensor bring_back(const OffloadedInput& saved) {
  c10::cuda::CUDAGuard device_guard(saved.device.index());
  saved.copied->block(c10::cuda::getCurrentCUDAStream(saved.device.index()));
  return saved.host.to(saved.device, /*non_blocking=*/true);
}

void log_offload_ignored_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    log::info("activation checkpointing: offload of saved inputs applies to CUDA tensors only; on the CPU they stay where they are");
  });
}

// What the node needs in backward besides its saved inputs.
struct SegmentState : torch::CustomClassHolder {
  Segment segment;
  ActivationCheckpointOptions options;
  std::vector<torch::Tensor> parameters, buffers;
  std::vector<bool> input_requires_grad;
  std::vector<OffloadedInput> offloaded;  // with offload: every input, in order (empty otherwise)
  std::optional<RngState> rng;
  AutocastState autocast;
  bool anchored = false;  // no input needs a gradient: the anchor makes the node part of the graph
};

// Every tensor that needs a gradient and that the recomputed graph reaches must be one its backward
// is asked for (an input or a listed parameter): any other would silently get none.
void check_all_leaves_listed(const variable_list& outputs, const std::unordered_set<const c10::TensorImpl*>& listed) {
  std::vector<torch::autograd::Node*> stack;
  std::unordered_set<torch::autograd::Node*> seen;
  for (const auto& o : outputs) {
    if (o.grad_fn()) stack.push_back(o.grad_fn().get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (const auto* accumulate = dynamic_cast<const torch::autograd::AccumulateGrad*>(node)) {
      if (!listed.count(accumulate->variable.unsafeGetTensorImpl())) {
        throw TrainingError(c10::str("activation checkpointing: the segment reads a tensor of shape ", accumulate->variable.sizes(),
                                     " that needs a gradient but is neither an input nor one of the segment's parameters; "
                                     "pass it among the parameters"));
      }
      continue;
    }
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
}

class CheckpointNode : public torch::autograd::Function<CheckpointNode> {
 public:
  static variable_list forward(torch::autograd::AutogradContext* ctx, c10::intrusive_ptr<SegmentState> state,
                               at::TensorList tensors) {
    ctx->set_materialize_grads(false);
    const size_t n = state->input_requires_grad.size();  // the rest: the anchor (see activation_checkpoint)
    const variable_list inputs(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(n));
    if (state->options.offload()) {
      for (const auto& x : inputs) state->offloaded.push_back(offload(x));
    } else {
      ctx->save_for_backward(inputs);
    }
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return state->segment(inputs);  // autograd is off here: nothing inside is kept
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<SegmentState>(ctx->saved_data["state"].toCapsule());
    const size_t n = state->input_requires_grad.size();
    variable_list result(1 + n + (state->anchored ? 1 : 0));  // the state's and the anchor's slots stay undefined
    if (std::none_of(grad_outputs.begin(), grad_outputs.end(), [](const torch::Tensor& g) { return g.defined(); })) return result;

    variable_list inputs;
    if (state->options.offload()) {
      if (state->offloaded.empty() && n > 0) {
        throw TrainingError("activation checkpointing: a second backward through a segment whose inputs were offloaded (retain_graph)");
      }
      for (const auto& saved : state->offloaded) inputs.push_back(bring_back(saved));
      state->offloaded.clear();
    } else {
      inputs = ctx->get_saved_variables();
    }
    for (size_t i = 0; i < n; ++i) inputs[i] = inputs[i].detach().requires_grad_(state->input_requires_grad[i]);

    // The buffers the recomputation updates (BatchNorm's statistics) are put back once the
    // recomputed graph is done with them: its backward checks they were not changed meanwhile.
    struct RestoreBuffers {
      const std::vector<torch::Tensor>& buffers;
      std::vector<torch::Tensor> before;
      ~RestoreBuffers() {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < before.size(); ++i) buffers[i].detach().copy_(before[i]);
      }
    } restore_buffers{state->buffers, {}};
    {
      torch::NoGradGuard no_grad;
      for (const auto& b : state->buffers) restore_buffers.before.push_back(b.detach().clone());
    }
    variable_list outputs;
    {
      std::optional<RngState> now;  // put back afterwards: the rest of the run draws as without checkpointing
      if (state->rng) {
        now = RngState::capture(cuda_devices_of(*state->rng));
        state->rng->restore();
      }
      {
        AutocastAs autocast(state->autocast);
        torch::AutoGradMode grad_mode(true);
        outputs = state->segment(inputs);
      }
      if (now) now->restore();
    }
    if (outputs.size() != grad_outputs.size()) {
      throw TrainingError(c10::str("activation checkpointing: the segment returned ", outputs.size(), " tensors when recomputed but ",
                                   grad_outputs.size(), " in the forward pass"));
    }

    variable_list differentiate, gradients;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (grad_outputs[i].defined() && outputs[i].requires_grad()) {
        differentiate.push_back(outputs[i]);
        gradients.push_back(grad_outputs[i]);
      }
    }
    std::unordered_set<const c10::TensorImpl*> listed;
    variable_list wrt;
    for (const auto& t : inputs) {
      listed.insert(t.unsafeGetTensorImpl());
      if (t.requires_grad()) wrt.push_back(t);
    }
    for (const auto& p : state->parameters) {
      listed.insert(p.unsafeGetTensorImpl());
      if (p.requires_grad()) wrt.push_back(p);
    }
    if (differentiate.empty() || wrt.empty()) return result;
    check_all_leaves_listed(differentiate, listed);
    // Into the parameters' .grad (their accumulators and hooks run here, once each) and the
    // detached inputs' .grad, which go back to the outer pass.
    torch::autograd::backward(differentiate, gradients, /*retain_graph=*/false, /*create_graph=*/false, wrt);
    for (size_t i = 0; i < n; ++i) result[1 + i] = inputs[i].grad();
    return result;
  }

 private:
  static std::set<c10::DeviceIndex> cuda_devices_of(const RngState& rng) {
    std::set<c10::DeviceIndex> out;
    for (const auto& [generator, ignored] : rng.states) {
      if (generator.device().is_cuda()) out.insert(generator.device().index());
    }
    return out;
  }
};

}  // namespace

variable_list activation_checkpoint(const Segment& segment, const variable_list& inputs, const std::vector<torch::Tensor>& parameters,
                                    const std::vector<torch::Tensor>& buffers, const ActivationCheckpointOptions& options) {
  if (!segment) throw OptionError("segment", "activation_checkpoint: the segment is empty");
  auto needs_grad = [](const torch::Tensor& t) { return t.defined() && t.requires_grad(); };
  const bool any_grad = std::any_of(inputs.begin(), inputs.end(), needs_grad) || std::any_of(parameters.begin(), parameters.end(), needs_grad);
  if (!torch::GradMode::is_enabled() || !any_grad) return segment(inputs);  // no backward will come: nothing to save

  auto state = c10::make_intrusive<SegmentState>();
  state->segment = segment;
  state->options = options;
  state->parameters = parameters;
  state->buffers = buffers;
  std::set<c10::DeviceIndex> cuda_devices;
  bool on_cuda = false;
  for (const auto& t : inputs) {
    if (!t.defined()) throw OptionError("inputs", "activation_checkpoint: an input is undefined");
    state->input_requires_grad.push_back(t.requires_grad());
    if (t.is_cuda()) {
      cuda_devices.insert(t.device().index());
      on_cuda = true;
    }
  }
  for (const auto& p : parameters) {
    if (p.is_cuda()) cuda_devices.insert(p.device().index());
  }
  if (options.offload() && !on_cuda) {
    log_offload_ignored_once();
    state->options.offload(false);
  } else if (options.offload()) {
    for (const auto& t : inputs) {
      if (!t.is_cuda()) throw OptionError("offload", "activation_checkpoint: offload needs every input on a CUDA device");
    }
  }
  if (options.preserve_rng_state()) state->rng = RngState::capture(cuda_devices);
  state->autocast = AutocastState::capture();

  // The parameters are not inputs of the node (their gradients are accumulated inside its
  // backward); when no input needs a gradient either, a leaf that does keeps the node in the graph.
  std::vector<torch::Tensor> tensors(inputs.begin(), inputs.end());
  if (std::none_of(inputs.begin(), inputs.end(), needs_grad)) {
    thread_local const torch::Tensor anchor = torch::zeros({}, torch::requires_grad());
    tensors.push_back(anchor);
    state->anchored = true;
  }
  return CheckpointNode::apply(std::move(state), at::TensorList(tensors));
}

torch::Tensor activation_checkpoint(torch::nn::Module& module, const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                    const torch::Tensor& input, const ActivationCheckpointOptions& options) {
  return activation_checkpoint([forward](const variable_list& in) { return variable_list{forward(in[0])}; }, {input},
                               module.parameters(), module.buffers(), options)[0];
}

}  // namespace frugal
