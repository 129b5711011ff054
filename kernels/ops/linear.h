// linear: y = act(x W^T + b). See linear.cpp for shapes, formulas and gradients.
#pragma once

#include <cstdint>

#include "kernels/options.h"  // Activation

namespace ember {

struct LinearAttrs {
  int64_t activation = 0;  // Activation
};

}  // namespace ember
