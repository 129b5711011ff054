#include "kernels/ops/dtype_promotion.h"

#include "kernels/functional.h"

namespace ember {

Tensor promote_to_float(const Tensor& x) { return is_floating(x.dtype()) ? x : cast(x, kDefaultFloat); }

Tensor to_dtype(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x : cast(x, dtype); }

}  // namespace ember
