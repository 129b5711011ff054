// The dtype an op computes in: integer inputs promoted to float, and the cast to a chosen dtype.
// Used by the op families whose math is floating (unary, binary, where, reductions, softmax,
// losses); both go through the cast op, so autograd records them.
#pragma once

#include "core/tensor.h"

namespace ember {

// Integer and bool tensors become f32 (math functions of integers are floats, as in PyTorch).
Tensor promote_to_float(const Tensor& x);

// Casts x to dtype if it differs (recording autograd through the cast op).
Tensor to_dtype(const Tensor& x, DType dtype);

}  // namespace ember
