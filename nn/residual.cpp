#include "nn/residual.h"

#include "kernels/functional.h"

namespace ember::nn {

ResidualImpl::ResidualImpl(std::shared_ptr<Module> b, std::shared_ptr<Module> s) : Module("Residual") {
  EMBER_CHECK(b != nullptr, "Residual: the body module is empty");
  body = register_module("body", std::move(b));
  if (s) shortcut = register_module("shortcut", std::move(s));
}

Tensor ResidualImpl::forward(const Tensor& x) {
  Tensor y = body->forward(x);
  Tensor s = shortcut ? shortcut->forward(x) : x;
  EMBER_CHECK(y.shape() == s.shape(), "Residual: the body gives ", y.shape(), " but the shortcut gives ", s.shape(),
              "; give a shortcut module that matches the shapes");
  return add(y, s);
}

}  // namespace ember::nn
