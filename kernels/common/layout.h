// Elementwise iteration layout: operands broadcast to the output shape, dims ordered by the
// output's memory order, and adjacent dims merged where every operand allows it.
//
// After make_layout, a contiguous add of two [64, 128] tensors is one dim of 8192 elements with
// stride 1 everywhere; adding a [128] bias gives two dims with the bias stride 0 in the outer one.
// Both the generic CPU loop (cpu_loops.h) and the generic CUDA kernel (cuda_loops.cuh) run over
// this description.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"

namespace ember {

inline constexpr int kMaxOperands = 4;  // the output plus up to three inputs (where)

struct ElementwiseLayout {
  int ndim = 0;
  int nops = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};                  // outermost first
  int64_t strides[kMaxOperands][kMaxDims] = {};  // in elements; operand 0 is the output

  // One dim (or none) with stride 1 for every operand: a flat loop over numel elements.
  bool contiguous() const {
    if (ndim == 0) return true;
    if (ndim > 1) return false;
    for (int k = 0; k < nops; ++k)
      if (strides[k][0] != 1) return false;
    return true;
  }
};

// operands[0] is the output, whose shape every input broadcasts to.
ElementwiseLayout make_layout(std::initializer_list<const Tensor*> operands);

// The output strides an elementwise op should allocate: those of an input that already has the
// output shape and is dense but not contiguous (e.g. channels-last), so layouts are preserved;
// empty (contiguous) otherwise.
Strides elementwise_out_strides(const Shape& out_shape, std::initializer_list<const Tensor*> inputs);

}  // namespace ember
