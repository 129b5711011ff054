// linear: y = act(x W^T + b). See linear.cpp for shapes, formulas and gradients.
#pragma once

#include <cstdint>

namespace ember {

enum class Activation : int64_t { none = 0, relu = 1, gelu = 2 };

struct LinearAttrs {
  int64_t activation = 0;  // Activation
};

}  // namespace ember
