// The backward engine: dependency counting over the recorded graph, then nodes run in reverse
// creation order (a node runs once every gradient flowing into it has arrived).
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

// Computes gradients of `roots` (weighted by `grads`; an undefined grad means 1 and is only
// allowed for one-element roots) and accumulates them into the leaves' .grad.
// Without retain_graph, saved tensors are freed as the nodes run; a second backward through the
// same nodes is then an error.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// Gradients of `outputs` with respect to `inputs`, returned instead of accumulated into .grad.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

// Runs `fn` once the backward pass running on this thread has finished its whole graph (the
// outermost one, when backward passes nest, as in activation checkpointing), before backward()
// returns: DDP waits for its last bucket reductions here. An error outside a backward pass.
void queue_callback(std::function<void()> fn);
// Whether a backward pass is running on this thread.
bool in_backward();

namespace detail {

// Note [gradient arithmetic]: the engine sums gradients, copies them into .grad and seeds a root
// with ones, but the ops that do that live in kernels/, a layer above core/ (ember_core may not
// call into ember_kernels; docs/architecture.md, "Layers"). So the ops are handed in: backward(),
// grad() and Tensor::backward() are defined in kernels/autograd_entry.cpp and run the engine with
// these. Every gradient computation enters through them, so the engine always has its arithmetic.
struct GradMath {
  Tensor (*add)(const Tensor& a, const Tensor& b);  // a + b, a new tensor
  void (*add_)(Tensor& acc, const Tensor& g);       // acc += g, in place
  Tensor (*clone)(const Tensor& t);
  Tensor (*ones_like)(const Tensor& t);
  Tensor (*to)(const Tensor& t, DType dtype);
};

// The engine proper, behind backward() and grad() above.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
                  const GradMath& math);
std::vector<Tensor> run_grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& grad_outputs, bool retain_graph, const GradMath& math);

}  // namespace detail

}  // namespace ember::autograd
