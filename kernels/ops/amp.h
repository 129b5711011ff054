// Loss-scaling kernels for mixed precision (used by amp::GradScaler). Both run entirely on the
// device, so an AMP training step needs no host synchronisation and can be captured in a graph.
//
//   amp_unscale(found_inf, inv_scale, g_1 .. g_n)
//       every g_i *= inv_scale, in place; found_inf (f32 [1]) is set to 1 if any element of any
//       g_i is inf or NaN (it is never cleared here: the scaler zeroes it once per step). One
//       launch for up to kAmpTensorsPerLaunch tensors (pointers travel as kernel arguments).
//   amp_update_scale(scale, growth_tracker, found_inf, skipped)
//       PyTorch's rule: if found_inf: scale *= backoff, tracker = 0, skipped += 1;
//       else tracker += 1 and, when it reaches growth_interval, scale *= growth (if that stays
//       finite) and tracker = 0. scale f32 [1], tracker i32 [1], skipped i64 [1].
#pragma once

#include <cstdint>

namespace ember {

inline constexpr int kAmpTensorsPerLaunch = 48;

struct AmpScaleAttrs {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

}  // namespace ember
