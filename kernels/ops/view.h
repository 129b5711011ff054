// The attributes of the view ops (the ops themselves: kernels/ops/view.cpp).
#pragma once

#include <cstdint>

#include "core/shape.h"

namespace ember {

// view and expand: the target shape (-1 entries as the caller gave them).
struct ShapeAttrs {
  int64_t n = 0;
  int64_t d[kMaxDims] = {};
  static ShapeAttrs from(const IntList& s) {
    ShapeAttrs a{};
    a.n = s.size();
    for (int i = 0; i < s.size(); ++i) a.d[i] = s[i];
    return a;
  }
  IntList list() const { return IntList(d, d + n); }
};

struct SliceAttrs {
  int64_t dim = 0, start = 0, end = 0, step = 1;
};

}  // namespace ember
