#include "nn/dropout.h"

#include "kernels/functional.h"

namespace ember::nn {

DropoutImpl::DropoutImpl(const DropoutOptions& o) : Module("Dropout"), options(o) {
  EMBER_CHECK(o.p() >= 0 && o.p() <= 1, "Dropout: probability must be in [0, 1], got ", o.p());
}

Tensor DropoutImpl::forward(const Tensor& x) { return dropout(x, options.p(), is_training()); }

std::string DropoutImpl::extra_repr() const { return str("p=", options.p()); }

}  // namespace ember::nn
