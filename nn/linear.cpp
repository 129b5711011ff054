#include "nn/linear.h"

#include <cmath>

#include "kernels/functional.h"
#include "nn/init.h"

namespace ember::nn {

LinearImpl::LinearImpl(const LinearOptions& o) : Module("Linear"), options(o) {
  EMBER_CHECK(o.in_features() >= 0 && o.out_features() >= 0,
              "Linear: feature counts must be >= 0, got in_features=", o.in_features(),
              ", out_features=", o.out_features());
  weight = register_parameter("weight", empty({o.out_features(), o.in_features()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_features()}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    int64_t fan_in = options.in_features();
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) { return linear(x, weight, bias); }

std::string LinearImpl::extra_repr() const {
  return str("in_features=", options.in_features(), ", out_features=", options.out_features(),
             ", bias=", bias.defined() ? "true" : "false");
}

}  // namespace ember::nn
