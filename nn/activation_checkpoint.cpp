#include "nn/activation_checkpoint.h"

#include <optional>

#include "core/autocast.h"
#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/rng.h"

namespace ember::nn {

namespace {

struct AutocastState {
  bool enabled[2] = {false, false};
  DType dtype[2] = {DType::f32, DType::f32};
  static AutocastState capture() {
    AutocastState s;
    for (DeviceType d : {DeviceType::cpu, DeviceType::cuda}) {
      int i = static_cast<int>(d);
      s.enabled[i] = autocast::is_enabled(d);
      s.dtype[i] = autocast::lower_dtype(d);
    }
    return s;
  }
};

struct CheckpointNode final : autograd::Node {
  SegmentFn fn;
  std::vector<autograd::SavedTensor> inputs;
  std::vector<bool> input_defined;
  bool preserve_rng = true;
  uint64_t rng_seed = 0, rng_offset = 0;
  AutocastState autocast_state;
  bool released = false;

  std::string name() const override { return "CheckpointBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    EMBER_CHECK(!released,
                "trying to backward through a checkpointed segment a second time; pass retain_graph=true "
                "to the first backward");
    // Detached copies of the inputs that take the gradients of the recomputed graph.
    std::vector<Tensor> in;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor t = input_defined[i] ? inputs[i].unpack("CheckpointBackward") : Tensor();
      if (t.defined()) {
        t = t.detach();
        if (next_edges[i].valid()) t.requires_grad_(true);
      }
      in.push_back(t);
    }
    std::vector<Tensor> outs;
    {
      autograd::EnableGradGuard enable;
      Generator& gen = default_generator();
      const uint64_t now_seed = gen.seed(), now_offset = gen.offset();
      if (preserve_rng) gen.set_state(rng_seed, rng_offset);
      std::optional<autocast::Scope> cpu_scope, cuda_scope;
      cpu_scope.emplace(DeviceType::cpu, autocast_state.dtype[0], autocast_state.enabled[0]);
      cuda_scope.emplace(DeviceType::cuda, autocast_state.dtype[1], autocast_state.enabled[1]);
      try {
        outs = fn(in);
      } catch (...) {
        if (preserve_rng) gen.set_state(now_seed, now_offset);
        throw;
      }
      if (preserve_rng) gen.set_state(now_seed, now_offset);
    }
    EMBER_CHECK(outs.size() == outputs.size(), "checkpoint: the recomputation returned ", outs.size(),
                " tensors but the forward returned ", outputs.size(), " (the segment must be deterministic)");
    std::vector<Tensor> roots, root_grads;
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!outs[k].defined() || !outs[k].requires_grad() || k >= grads.size() || !grads[k].defined()) continue;
      EMBER_CHECK(outs[k].shape() == outputs[k].shape, "checkpoint: output ", k, " was ", outputs[k].shape,
                  " in forward but ", outs[k].shape(), " when recomputed");
      roots.push_back(outs[k]);
      root_grads.push_back(grads[k]);
    }
    if (!roots.empty()) autograd::backward(roots, root_grads);
    std::vector<Tensor> result;
    for (size_t i = 0; i < in.size(); ++i)
      result.push_back(in[i].defined() && next_edges[i].valid() ? in[i].grad() : Tensor());
    return result;
  }

  void release_saved() override {
    for (auto& s : inputs) s.release();
    released = true;
  }
};

}  // namespace

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs, bool preserve_rng_state) {
  EMBER_CHECK(fn != nullptr, "checkpoint: empty function");
  if (!autograd::grad_mode_enabled()) return fn(inputs);
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  AutocastState ac = AutocastState::capture();
  std::vector<Tensor> detached;
  for (const Tensor& t : inputs) detached.push_back(t.defined() ? t.detach() : t);
  std::vector<Tensor> outs;
  {
    autograd::NoGradGuard no_grad;  // nothing inside the segment is recorded, so nothing is kept
    outs = fn(detached);
  }
  auto node = std::make_shared<CheckpointNode>();
  node->fn = fn;
  node->preserve_rng = preserve_rng_state;
  node->rng_seed = seed;
  node->rng_offset = offset;
  node->autocast_state = ac;
  for (const Tensor& t : inputs) {
    node->next_edges.push_back(autograd::gradient_edge(t));
    node->inputs.emplace_back(t);
    node->input_defined.push_back(t.defined());
  }
  for (const Tensor& o : outs) {
    EMBER_CHECK(o.defined(), "checkpoint: the segment returned an undefined tensor");
  }
  autograd::set_history(node, outs);
  return outs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, bool preserve_rng_state) {
  EMBER_CHECK(fn != nullptr, "checkpoint: empty function");
  std::vector<Tensor> out = checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                                       std::vector<Tensor>{input}, preserve_rng_state);
  return out[0];
}

CheckpointImpl::CheckpointImpl(std::shared_ptr<Module> m) : Module("Checkpoint") {
  EMBER_CHECK(m != nullptr, "Checkpoint: the wrapped module is empty");
  module = register_module("module", std::move(m));
}

Tensor CheckpointImpl::forward(const Tensor& x) {
  if (!is_training() || !autograd::grad_mode_enabled()) return module->forward(x);
  std::shared_ptr<Module> m = module;
  return checkpoint([m](const Tensor& in) { return m->forward(in); }, x);
}

}  // namespace ember::nn
