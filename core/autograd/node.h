// Autograd graph nodes.
//
// A differentiable op that ran with grad mode on and an input requiring grad records a Node: it
// holds what the op saved for backward and one Edge per op input, pointing at the node that
// produced that input (or at the AccumulateGrad node of a leaf). The engine (engine.h) walks these
// edges in reverse creation order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

struct Node;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;  // which of fn's forward outputs the gradient belongs to
  bool valid() const { return fn != nullptr; }
};

// Thread-local switch: while grad mode is off, ops record nothing.
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(true); }
  ~EnableGradGuard() { set_grad_mode(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Metadata of a forward output, to check and shape the gradients flowing into a node.
struct OutputMeta {
  Shape shape;
  DType dtype = kDefaultFloat;
  Device device;
};

struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  // grads[i] is the gradient of forward output i (undefined when nothing flowed into it: zero).
  // Returns one gradient per next edge (undefined where no gradient is needed).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Drops saved tensors after a backward without retain_graph.
  virtual void release_saved() {}

  size_t num_outputs() const { return outputs.size(); }
  void retain_output(uint32_t output_nr, const std::shared_ptr<TensorImpl>& t);

  std::vector<Edge> next_edges;                     // one per forward input
  std::vector<OutputMeta> outputs;                  // one per forward output
  std::vector<std::weak_ptr<TensorImpl>> retained;  // outputs that asked for retain_grad
  uint64_t sequence_nr;                             // creation order: later nodes run first
};

// The sink for a leaf: adds the incoming gradient into leaf.grad.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::shared_ptr<TensorImpl> variable;
};

// The edge a gradient for `t` must flow into: its grad_fn, or its leaf accumulator (created on
// first use). Invalid when `t` does not require grad.
Edge gradient_edge(const Tensor& t);

// Makes `outputs` results of `node` (sets grad_fn, output_nr, requires_grad) and fills node->outputs.
void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& outputs);

// A tensor saved for backward: a detached alias plus the storage version when it was saved, so
// an in-place change between forward and backward is reported instead of giving wrong gradients.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // The saved tensor; throws if it was released or modified in place since it was saved.
  Tensor unpack(const char* node_name) const;
  void release() {
    data_ = Tensor();
    released_ = true;
  }
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool released_ = false;
};

}  // namespace ember::autograd
