#include "core/autograd/engine.h"

#include <atomic>
#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd/node.h"

namespace ember::autograd {

// ---- grad mode ----

namespace {
thread_local bool t_grad_mode = true;
std::atomic<uint64_t> g_sequence{0};
// The arithmetic of the backward pass running on this thread (Note [gradient arithmetic]).
thread_local const detail::GradMath* t_math = nullptr;

const detail::GradMath& grad_math() {
  EMBER_CHECK(t_math != nullptr, "autograd: gradient arithmetic used outside a backward pass");
  return *t_math;
}
}  // namespace

bool grad_mode_enabled() { return t_grad_mode; }
void set_grad_mode(bool enabled) { t_grad_mode = enabled; }

Node::Node() : sequence_nr(g_sequence.fetch_add(1, std::memory_order_relaxed)) {}

void Node::retain_output(uint32_t output_nr, const std::shared_ptr<TensorImpl>& t) {
  if (retained.size() < outputs.size()) retained.resize(outputs.size());
  retained.at(output_nr) = t;
}

// ---- leaves ----

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : variable(std::move(leaf)) {
  outputs.push_back({variable->shape, variable->dtype, variable->storage->device()});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads.at(0));
  if (!g.defined()) return {};
  Tensor var(variable);
  Tensor old = var.grad();
  if (!old.defined()) {
    // Keep the incoming buffer when nobody else holds it and it is dense; otherwise copy, so that
    // in-place changes to .grad (clipping, scaling) never write into another tensor or a broadcast.
    bool shared = g.impl_ptr().use_count() > 1 || g.storage().use_count() > 1;
    if (shared || !g.is_non_overlapping_and_dense()) g = grad_math().clone(g);
    var.set_grad(g);
  } else if (var.impl()->autograd->accumulate_grad_in_place) {
    grad_math().add_(old, g);
  } else {
    var.set_grad(grad_math().add(old, g));
  }
  if (!variable->autograd->post_accumulate_hooks.empty()) {
    // a copy: a hook may register or remove hooks
    auto hooks = variable->autograd->post_accumulate_hooks;
    for (auto& [id, fn] : hooks) fn(var);
  }
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& m = t.impl()->meta();
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& outputs) {
  node->outputs.clear();
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    node->outputs.push_back({o.shape(), o.dtype(), o.device()});
    if (!is_floating(o.dtype())) continue;  // integer outputs (argmax, masks) carry no gradient
    AutogradMeta& m = o.impl()->meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = i;
  }
}

// ---- saved tensors ----

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const char* node_name) const {
  EMBER_CHECK(!released_, "trying to backward through the graph a second time (", node_name,
              " has already freed its saved tensors); pass retain_graph=true to the first backward");
  if (data_.defined()) {
    EMBER_CHECK(data_.version() == version_, "a tensor saved by ", node_name,
                " for backward was modified in place after it was saved (version ", version_, " -> ", data_.version(),
                "); clone it before the in-place op");
  }
  return data_;
}

// ---- the engine ----

namespace {

struct ByLaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

void check_grad(const Node& node, size_t i, const Tensor& g, const OutputMeta& want) {
  EMBER_CHECK(g.shape() == want.shape && g.dtype() == want.dtype && g.device() == want.device, "backward of ",
              node.name(), " produced a gradient ", g.describe(), " for input ", i, " but that input is ", want.dtype,
              want.shape, " on ", want.device);
}

struct Task {
  std::vector<Edge> roots;
  std::vector<Tensor> root_grads;
  // Capture mode (autograd::grad): gradients arriving at these edges are stored, not accumulated.
  std::unordered_map<const Node*, std::vector<std::pair<uint32_t, size_t>>> captures;
  std::vector<Tensor> captured;
};

// Callbacks queued during a backward (queue_callback), run when the outermost backward on this
// thread finishes its graph.
thread_local int t_backward_depth = 0;
thread_local std::vector<std::function<void()>> t_callbacks;

void run_graph(Task& task, bool retain_graph);

void run(Task& task, bool retain_graph, const detail::GradMath& math) {
  struct Depth {
    explicit Depth(const detail::GradMath* m) : prev_math(t_math) {
      ++t_backward_depth;
      t_math = m;
    }
    ~Depth() {
      t_math = prev_math;
      if (--t_backward_depth == 0) t_callbacks.clear();  // after an error too
    }
    const detail::GradMath* prev_math;
  } depth(&math);
  run_graph(task, retain_graph);
  if (t_backward_depth == 1) {
    // Callbacks may queue more callbacks (they run too, in order).
    for (size_t i = 0; i < t_callbacks.size(); ++i) {
      auto fn = std::move(t_callbacks[i]);
      fn();
    }
    t_callbacks.clear();
  }
}

void run_graph(Task& task, bool retain_graph) {
  NoGradGuard no_grad;
  const detail::GradMath& math = grad_math();
  // 1. dependency counts: how many edges point at each node from the part of the graph reached
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const Edge& e : task.roots) {
    if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  // 2. input buffers, seeded with the root gradients
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto accumulate = [&](const Edge& e, Tensor g) {
    std::vector<Tensor>& buf = buffers[e.fn.get()];
    if (buf.empty()) buf.resize(e.fn->num_outputs());
    Tensor& slot = buf.at(e.input_nr);
    slot = slot.defined() ? math.add(slot, g) : std::move(g);
  };
  std::priority_queue<Node*, std::vector<Node*>, ByLaterFirst> ready;
  std::unordered_set<Node*> queued;
  for (size_t i = 0; i < task.roots.size(); ++i) {
    const Edge& e = task.roots[i];
    if (!e.valid()) continue;
    accumulate(e, task.root_grads[i]);
    if (deps[e.fn.get()] == 0 && queued.insert(e.fn.get()).second) ready.push(e.fn.get());
  }
  // 3. run nodes latest-first once all their inputs are in
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(node->num_outputs());
    for (size_t i = 0; i < node->retained.size(); ++i) {
      if (auto t = node->retained[i].lock(); t && grads[i].defined()) {
        Tensor tt(t);
        Tensor old = tt.grad();
        tt.set_grad(old.defined() ? math.add(old, grads[i]) : math.clone(grads[i]));
      }
    }
    if (auto it = task.captures.find(node); it != task.captures.end()) {
      for (auto [input_nr, slot] : it->second) {
        if (input_nr < grads.size() && grads[input_nr].defined()) {
          Tensor& c = task.captured[slot];
          c = c.defined() ? math.add(c, grads[input_nr]) : grads[input_nr];
        }
      }
      if (dynamic_cast<AccumulateGrad*>(node) != nullptr) continue;  // grad(): leaves are not written
    }
    std::vector<Tensor> out = node->apply(std::move(grads));
    if (!retain_graph) node->release_saved();
    EMBER_CHECK(out.empty() || out.size() == node->next_edges.size(), "backward of ", node->name(), " returned ",
                out.size(), " gradients for ", node->next_edges.size(), " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (i < out.size() && out[i].defined()) {
        check_grad(*node, i, out[i], e.fn->outputs.at(e.input_nr));
        accumulate(e, std::move(out[i]));
      }
      if (--deps[e.fn.get()] == 0 && queued.insert(e.fn.get()).second) ready.push(e.fn.get());
    }
  }
}

Tensor default_root_grad(const Tensor& root, const Tensor& grad, const detail::GradMath& math) {
  if (grad.defined()) {
    EMBER_CHECK(grad.shape() == root.shape(), "backward: gradient shape ", grad.shape(),
                " does not match the output shape ", root.shape());
    EMBER_CHECK(grad.device() == root.device(), "backward: gradient on ", grad.device(), " but the output is on ",
                root.device());
    return grad.dtype() == root.dtype() ? grad : math.to(grad, root.dtype());
  }
  EMBER_CHECK(root.numel() == 1, "grad can be implicitly created only for one-element outputs; the output has shape ",
              root.shape(), ", so pass a gradient to backward()");
  return math.ones_like(root);
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  EMBER_CHECK(t_backward_depth > 0, "queue_callback: no backward pass is running on this thread");
  t_callbacks.push_back(std::move(fn));
}

bool in_backward() { return t_backward_depth > 0; }

void detail::run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
                          const GradMath& math) {
  EMBER_CHECK(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(), " outputs but ", grads.size(),
              " gradients");
  Task task;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    EMBER_CHECK(r.defined(), "backward on an undefined tensor");
    EMBER_CHECK(r.requires_grad(), "element ", i, " of the outputs does not require grad and has no grad_fn (",
                r.describe(), "); did you run the forward pass under no_grad or detach it?");
    task.roots.push_back(gradient_edge(r));
    task.root_grads.push_back(default_root_grad(r, grads.empty() ? Tensor() : grads[i], math));
  }
  run(task, retain_graph, math);
}

std::vector<Tensor> detail::run_grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                     const std::vector<Tensor>& grad_outputs, bool retain_graph, const GradMath& math) {
  Task task;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& r = outputs[i];
    EMBER_CHECK(r.requires_grad(), "grad: output ", i, " does not require grad");
    task.roots.push_back(gradient_edge(r));
    task.root_grads.push_back(default_root_grad(r, grad_outputs.empty() ? Tensor() : grad_outputs[i], math));
  }
  task.captured.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].requires_grad(), "grad: input ", i, " does not require grad");
    Edge e = gradient_edge(inputs[i]);
    task.captures[e.fn.get()].push_back({e.input_nr, i});
  }
  run(task, retain_graph, math);
  return task.captured;
}

}  // namespace ember::autograd
