// cat's attributes (the op itself: kernels/ops/cat.cpp).
#pragma once

#include <cstdint>

namespace ember {

struct CatAttrs {
  int64_t dim = 0;
};

}  // namespace ember
