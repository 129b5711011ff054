// Helpers shared by the elementwise op families (unary, binary, where, cast).
#pragma once

#include "core/tensor.h"

namespace ember {

// Integer and bool tensors become f32 (math functions of integers are floats, as in PyTorch).
Tensor promote_to_float(const Tensor& x);

// Casts x to dtype if it differs (recording autograd through the cast op).
Tensor to_dtype(const Tensor& x, DType dtype);

}  // namespace ember
