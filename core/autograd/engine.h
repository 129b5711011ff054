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

}  // namespace ember::autograd
