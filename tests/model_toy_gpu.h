// The made-up GPU the model tests (test_roofline.cpp, test_time_model.cpp) work their expected
// values out on: round numbers, so every expectation can be checked by hand.
#pragma once

#include "bench/model/gpu_model.h"

namespace ember::model::testing {

inline GpuSpec toy_gpu() {
  GpuSpec g;
  g.name = "toy";
  g.sms = 100;
  g.clock_ghz = 1;
  g.hbm_bytes_per_s = 1e12;
  g.fp32_flops = 1e13;
  g.tf32_flops = 1e14;
  g.f16_flops = 2e14;
  g.bf16_flops = 4e14;
  g.max_warps_per_sm = 64;
  return g;
}

}  // namespace ember::model::testing
