// Indexing by integer tensors (i32 or i64 indices).
//
//   index_select(x, dim, index[K])     out = x with dim replaced by K: out[.., k, ..] = x[.., index[k], ..]
//   gather(x, dim, index)              out has index's shape: out[i][j] = x[index[i][j]][j] (dim 0),
//                                      index.size(d) <= x.size(d) for d != dim
//   index_add(self, dim, index, src)   out = self, then out[.., index[k], ..] += src[.., k, ..]
//   scatter_add(self, dim, index, src) out = self, then out[index[i][j]][j] += src[i][j] (dim 0)
// Gradients: index_select -> index_add into zeros; gather -> scatter_add into zeros;
//            index_add/scatter_add -> (g, index_select(g) / gather(g)).
// Indices are checked: on the CPU at once; on CUDA through the device error word (Note [device
// errors] in core/cuda/runtime.h), reported at the next synchronisation.
//
// Views: x is seen as [outer, size(dim), inner] (contiguous inputs).
#pragma once

#include <cstdint>

#include "core/shape.h"

namespace ember {

struct IndexAttrs {
  int64_t dim = 0;
};

// The [outer, size(dim), inner] view of a shape (size 1 for a 0-d shape).
struct Split {
  int64_t outer = 1, size = 1, inner = 1;
};
inline Split split_at(const Shape& s, int d) {
  Split r;
  for (int i = 0; i < d; ++i) r.outer *= s[i];
  r.size = s.size() > 0 ? s[d] : 1;
  for (int i = d + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

}  // namespace ember
