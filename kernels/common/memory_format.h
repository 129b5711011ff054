// Memory formats of 4-D NCHW-shaped tensors: contiguous (NCHW) and channels-last (NHWC in memory,
// strides (HWC, 1, WC, C)). Convolution, pooling and batch norm run in either; a channels-last
// input gives a channels-last output, anything else runs (and answers) in NCHW.
//
// Note [channels-last decision]: a tensor whose C or H*W is 1 can be both contiguous and
// channels-last; it is treated as NCHW (both layouts are the same bytes). A tensor that is
// neither (sliced, transposed) is first made NCHW-contiguous.
#pragma once

#include "core/tensor.h"

namespace ember {

// Strides of a channels-last (NHWC) tensor of 4-D shape [N, C, H, W].
Strides channels_last_strides(const Shape& nchw);

// True when op inputs of this layout should run channels-last (see the Note above).
inline bool runs_channels_last(const Tensor& x) {
  return x.defined() && x.dim() == 4 && x.numel() > 0 && x.is_channels_last() && !x.is_contiguous();
}

// x in the requested memory format: x itself when it already is, else a copy (no autograd).
Tensor contiguous_as(const Tensor& x, bool channels_last);

// Output strides for an op whose output layout follows `channels_last`: empty (contiguous) or NHWC.
inline Strides layout_strides(const Shape& shape, bool channels_last) {
  return channels_last ? channels_last_strides(shape) : Strides();
}

}  // namespace ember
