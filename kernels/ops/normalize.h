// normalize_u8: uint8 images to normalised floats in one pass (what torchvision's ToTensor +
// Normalize do, fused, and run after the host-to-device copy so only bytes cross the bus).
//
//   x    u8 [N, C, H, W] (any number of trailing dims after C), or any shape when there is one
//        channel (e.g. [N, H, W] or [N, D])
//   out  f32/f64/f16/bf16, x's shape:  out[n, c, ...] = (x[n, c, ...] / 255 - mean[c]) / std[c]
//
// mean and std have one entry per channel (dim 1 of the input, which then needs at least 2 dims),
// or a single entry that applies to every element. Up to kMaxNormalizeChannels channels.
// Numerics follow PyTorch's ToTensor then Normalize: x / 255 rounded to float, then (v - mean)
// rounded, then / std rounded (all in float for f32/f16/bf16 outputs, in double for f64), then one
// rounding to the output type. Not differentiable (the input is integer).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace ember {

inline constexpr int kMaxNormalizeChannels = 8;

struct NormalizeU8Attrs {
  int32_t channels = 1;  // entries used in mean/std
  int32_t dtype = 0;     // output DType, as an integer
  double mean[kMaxNormalizeChannels] = {};
  double std[kMaxNormalizeChannels] = {};
};

// The op's attributes from per-channel mean and std (checks their counts); the functional
// normalize_u8 and the op's samples and benchmark cases build them the same way.
NormalizeU8Attrs normalize_u8_attrs(const std::vector<double>& mean, const std::vector<double>& std, DType dtype);

// One element; Acc is float (f32/f16/bf16 outputs) or double (f64).
template <class Acc>
EMBER_HD inline Acc normalize_u8_value(uint8_t x, Acc mean, Acc std) {
  Acc v = static_cast<Acc>(x) / static_cast<Acc>(255);
  return (v - mean) / std;
}

}  // namespace ember
