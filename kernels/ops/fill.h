// fill and arange: write values into an existing tensor (in place, no autograd).
//
//   fill(self, value)         every element = value (converted to self's dtype)
//   arange(self, start, step) element i (row-major) = start + i * step; self contiguous
#pragma once

#include <cstdint>

#include "kernels/ops/copy.h"

namespace ember {

struct ArangeAttrs {
  double start = 0, step = 1;
};

template <class T>
struct FillFn {
  T value;
  EMBER_HD T operator()() const { return value; }
};

}  // namespace ember
