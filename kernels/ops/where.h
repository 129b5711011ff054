// where(cond, a, b): a where cond is true, else b; cond (bool), a and b broadcast together.
// Backward: dA = where(cond, g, 0) and dB = where(cond, 0, g), summed back to each input's shape.
#pragma once

#include "core/error.h"

namespace ember {

template <class T>
struct WhereFn {
  EMBER_HD T operator()(bool c, T a, T b) const { return c ? a : b; }
};

}  // namespace ember
