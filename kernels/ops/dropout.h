// dropout(x; p, seed, base): y_i = x_i * m_i / (1 - p) with the keep mask
//   m_i = [philox_uniform(seed, base, i) >= p]          (i = the row-major index of the element)
// drawn from the Philox stream reserved by the functional API (Note [Philox streams] in
// core/rng.h), so the CPU and CUDA give the same mask for the same seed and offset. p = 1 drops
// everything (scale 0). The product is x * (m * scale), so a dropped NaN or inf stays NaN, as in
// PyTorch's kernel.
//
// Gradient: dx = g * m / (1 - p), i.e. the same op applied to g with the same (p, seed, base): the
// mask is recomputed from the counters instead of being saved. That costs one Philox call per 4
// elements in the backward (free next to the memory traffic) and saves an n-byte mask per dropout
// layer for the whole forward-backward interval.
#pragma once

#include <cstdint>

namespace ember {

struct DropoutAttrs {
  double p = 0;
  uint64_t seed = 0, base = 0;
  const uint64_t* graph_state = nullptr;  // CUDA graph capture: Note [Philox in CUDA graphs] (core/rng.h)
};

// 1 / (1 - p), or 0 when everything is dropped.
inline double dropout_scale(double p) { return p < 1 ? 1.0 / (1.0 - p) : 0.0; }

}  // namespace ember
