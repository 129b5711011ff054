// f16 and bf16 as the simulator's own code converts them: through the CUDA toolkit's host
// conversions (round to nearest even, as ember's core/half.h and the hardware round), so the
// simulator needs nothing of ember's core.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ember::sim {

inline float f16_to_float(uint16_t bits) {
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}
inline uint16_t float_to_f16(float v) { return __half_raw(__float2half_rn(v)).x; }
inline float bf16_to_float(uint16_t bits) {
  __nv_bfloat16_raw r;
  r.x = bits;
  return __bfloat162float(__nv_bfloat16(r));
}
inline uint16_t float_to_bf16(float v) { return __nv_bfloat16_raw(__float2bfloat16_rn(v)).x; }

// v rounded to the nearest f16 / bf16 value.
inline float round_f16(float v) { return f16_to_float(float_to_f16(v)); }
inline float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

}  // namespace ember::sim
