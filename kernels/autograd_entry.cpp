// The autograd entry points declared in core/autograd/engine.h and core/tensor.h. They live here,
// not in core/, because they hand the engine the ops it computes gradients with (Note [gradient
// arithmetic] in core/autograd/engine.h): core/ may not call up into kernels/.
#include "core/autograd/engine.h"
#include "kernels/functional.h"

namespace ember {

namespace {

const autograd::detail::GradMath kGradMath{
    [](const Tensor& a, const Tensor& b) { return a.add(b); },
    [](Tensor& acc, const Tensor& g) { acc.add_(g); },
    [](const Tensor& t) { return t.clone(); },
    [](const Tensor& t) { return empty(t.shape(), TensorOptions().dtype(t.dtype()).device(t.device())).fill_(1.0); },
    [](const Tensor& t, DType dtype) { return t.to(dtype); },
};

}  // namespace

namespace autograd {

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  detail::run_backward(roots, grads, retain_graph, kGradMath);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  return detail::run_grad(outputs, inputs, grad_outputs, retain_graph, kGradMath);
}

}  // namespace autograd

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

}  // namespace ember
