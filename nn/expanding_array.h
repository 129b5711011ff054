// ExpandingArray2: a {height, width} pair of sizes (kernel, stride, padding, dilation) in the
// options of the 2-D convolution and pooling modules. An int option setter expands to {n, n}.
#pragma once

#include <array>
#include <cstdint>

namespace ember::nn {

using ExpandingArray2 = std::array<int64_t, 2>;

}  // namespace ember::nn
