// Shared by the pooling modules: printing of size pairs and the stride default (the kernel size).
#pragma once

#include <string>

#include "core/error.h"
#include "nn/expanding_array.h"

namespace ember::nn::pool_util {

inline std::string pair_str(const ExpandingArray2& a) { return str("(", a[0], ", ", a[1], ")"); }
inline ExpandingArray2 stride_or_kernel(const ExpandingArray2& s, const ExpandingArray2& k) {
  return s == ExpandingArray2{0, 0} ? k : s;
}

}  // namespace ember::nn::pool_util
