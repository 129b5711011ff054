// cast and copy.
//
//   cast(x, dtype) -> y      y = x converted elementwise; y keeps x's shape (and dense layout).
//                            Backward: dy converted back to x's dtype.
//   cast_many(x0, x1, ..., dtype) -> y0, y1, ...
//                            each xi (contiguous, floating) converted as cast does, all in one
//                            multi-tensor launch: autocast's casts of an op's inputs (Note
//                            [autocast casts in one launch] in kernels/autocast_policy.cpp).
//                            Backward: the dyi converted back to their xi's dtypes, one launch
//                            per distinct dtype.
//   copy(dst, src)           dst[...] = src broadcast to dst's shape, converting the dtype; dst may
//                            be any strided view. The one op whose operands may sit on different
//                            devices: host<->device and device<->device copies need both sides
//                            contiguous with the same dtype (the functional copy_ arranges that)
//                            and run as cudaMemcpyAsync on the current stream of the CUDA side.
//
// Conversions: through float for f16/bf16, `!= 0` to bool, C++ truncation float->int (values out
// of an integer type's range are unspecified, as in PyTorch).
#pragma once

#include <type_traits>

#include "core/dtype.h"

namespace ember {

struct CastAttrs {
  int64_t dtype = 0;       // DType
  int64_t contiguous = 0;  // 1: the result is contiguous (contiguous()); 0: keeps x's dense layout
};
struct CastManyAttrs {
  int64_t dtype = 0;  // DType of every output
};
struct CopyAttrs {
  int64_t non_blocking = 0;
};

template <class Out, class In>
EMBER_HD inline Out convert(In v) {
  if constexpr (std::is_same_v<Out, In>) {
    return v;
  } else if constexpr (std::is_same_v<Out, bool>) {
    if constexpr (std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>) return static_cast<float>(v) != 0.0f;
    else return v != In(0);
  } else if constexpr (std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>) {
    return convert<Out, float>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>) {
    return Out(static_cast<float>(v));
  } else {
    return static_cast<Out>(v);
  }
}

template <class Out, class In>
struct ConvertFn {
  EMBER_HD Out operator()(In v) const { return convert<Out, In>(v); }
};

}  // namespace ember
