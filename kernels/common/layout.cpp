#include "kernels/common/layout.h"

#include <algorithm>
#include <numeric>

namespace ember {

ElementwiseLayout make_layout(std::initializer_list<const Tensor*> operands) {
  ElementwiseLayout L;
  L.nops = static_cast<int>(operands.size());
  EMBER_CHECK(L.nops >= 1 && L.nops <= kMaxOperands, "elementwise layout: bad operand count ", L.nops);
  const Tensor& out = **operands.begin();
  const Shape& shape = out.shape();
  int nd = shape.size();
  L.numel = shape.numel();

  // broadcast strides of every operand against the output shape
  int64_t st[kMaxOperands][kMaxDims] = {};
  int k = 0;
  for (const Tensor* t : operands) {
    int off = nd - t->dim();
    EMBER_CHECK(off >= 0, "elementwise layout: operand ", k, " has more dims than the output");
    for (int d = 0; d < nd; ++d) {
      int td = d - off;
      if (td < 0 || t->shape()[td] == 1) st[k][d] = 0;
      else {
        EMBER_CHECK(t->shape()[td] == shape[d], "elementwise layout: operand ", k, " shape ", t->shape(),
                    " does not broadcast to ", shape);
        st[k][d] = t->strides()[td];
      }
    }
    ++k;
  }

  // order dims outermost-first by the output's strides (ties: by the inputs'), drop size-1 dims
  std::vector<int> perm;
  for (int d = 0; d < nd; ++d)
    if (shape[d] != 1) perm.push_back(d);
  std::stable_sort(perm.begin(), perm.end(), [&](int a, int b) {
    for (int op = 0; op < L.nops; ++op) {
      if (st[op][a] == 0 || st[op][b] == 0) continue;  // broadcast dims don't order
      if (st[op][a] != st[op][b]) return st[op][a] > st[op][b];
    }
    return false;
  });

  // coalesce: outer dim a and inner dim b merge when stride[a] == stride[b] * size[b] for all
  for (int d : perm) {
    if (L.ndim > 0) {
      int last = L.ndim - 1;
      bool merge = true;
      for (int op = 0; op < L.nops; ++op)
        if (L.strides[op][last] != st[op][d] * shape[d]) {
          merge = false;
          break;
        }
      if (merge) {
        L.sizes[last] *= shape[d];
        for (int op = 0; op < L.nops; ++op) L.strides[op][last] = st[op][d];
        continue;
      }
    }
    L.sizes[L.ndim] = shape[d];
    for (int op = 0; op < L.nops; ++op) L.strides[op][L.ndim] = st[op][d];
    ++L.ndim;
  }
  return L;
}

Strides elementwise_out_strides(const Shape& out_shape, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (t->shape() == out_shape && !t->is_contiguous() && t->is_non_overlapping_and_dense()) {
      return t->strides();
    }
  }
  return {};
}

}  // namespace ember
