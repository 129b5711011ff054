// The [A, C, B] view of a tensor around one dim: what softmax, log_softmax and the class-dim
// losses reduce over, on the CPU (kernels/ops/softmax.cpp, loss.cpp) and on the GPU
// (kernels/common/row_kernels.cuh). A = product of the dims before d, C = the dim's length (the row
// length), B = product of the dims after d; row (a, b) is the C elements x[a, :, b] (stride B).
#pragma once

#include <cstdint>

#include "core/shape.h"

namespace ember {

struct RowGeometry {
  int64_t A = 1, C = 1, B = 1;
  int64_t rows() const { return A * B; }
};

// The geometry around dim `d` (already wrapped; 0-d tensors give [1, 1, 1]).
inline RowGeometry row_geometry(const Shape& s, int d) {
  RowGeometry g;
  if (s.size() == 0) return g;
  for (int i = 0; i < d; ++i) g.A *= s[i];
  g.C = s[d];
  for (int i = d + 1; i < s.size(); ++i) g.B *= s[i];
  return g;
}

}  // namespace ember
