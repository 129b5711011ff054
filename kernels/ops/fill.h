// fill, zero_many and arange: write values into existing tensors (in place, no autograd).
//
//   fill(self, value)         every element = value (converted to self's dtype)
//   zero_many(t0, t1, ...)    every element of every tensor = 0 (all bits clear: +0 in every dtype);
//                             each tensor dense (contiguous or a permutation of it), all on one
//                             device; one multi-tensor launch on CUDA. Optimizer::zero_grad(false)
//                             zeroes the gradients with it, as PyTorch's foreach zero_ does.
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
