// The simulated kernels behind the simulator's cuDNN convolutions (cudnn.cpp calls them, conv.cu
// has them): forward, backward-data and backward-filter written from the definitions (cross-
// correlation over a group's channels), with the worst numerics the call's configuration permits
// described by ConvNumerics. Simulator build only; Note [simulated vendor libraries] in common.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sim/libs/common.h"

namespace ember::sim::libs::conv {

enum class Dir : uint8_t { forward, backward_data, backward_filter };

// One 2-d convolution: x [N, C, H, W], w [K, C/G, R, S], y [N, K, P, Q], each with element strides
// in that logical order (the filter's from its format: KCRS or KRSC).
struct ConvGeom {
  int64_t N = 0, C = 0, H = 0, W = 0, K = 0, R = 0, S = 0, P = 0, Q = 0, G = 1;
  int64_t ph = 0, pw = 0, sh = 1, sw = 1, dh = 1, dw = 1;
  bool flip = false;  // CUDNN_CONVOLUTION: the filter is applied rotated by 180 degrees
  int64_t xs[4] = {}, ws[4] = {}, ys[4] = {};
  int64_t Cg() const { return C / G; }
  int64_t Kg() const { return K / G; }
};

// How products are rounded and summed (see Note [emulated convolution numerics] in conv.cu).
enum class OperandRounding : uint8_t { none, tf32, f16 };
struct ConvNumerics {
  Elem elem = Elem::f32;  // the tensors' element type
  bool acc_f64 = false;   // accumulate in double (f64 data), else in float
  OperandRounding operands = OperandRounding::none;
  int64_t chunk = 32;             // products summed in the accumulator before a partial sum is combined
  bool partials_in_type = false;  // partial sums rounded to `elem` and added in `elem` (f16/bf16)
  bool partials_rounded = false;  // partial sums rounded to `elem`, then added in the accumulator
  bool nondeterministic = false;  // partial sums combined in an order that changes with `seed`
  uint64_t seed = 0;
  bool transform_error = false;  // FFT / Winograd-nonfused: error growing with the inputs
  uint64_t transform_seed = 0;
  double alpha = 1, beta = 0;
};

// Enqueues the convolution `dir` on `stream`:
//   forward:         a = x,  b = w,  out = y
//   backward_data:   a = dy, b = w,  out = dx
//   backward_filter: a = x,  b = dy, out = dw
// out = alpha * result + beta * out (out is not read when beta is 0). `workspace` (may be null when
// `workspace_bytes` is 0) is touched at both ends in stream order, as an algorithm using it would.
// Throws std::runtime_error when the launch fails (sim/libs/launch.h).
void enqueue(Dir dir, const ConvGeom& g, const ConvNumerics& num, const void* a, const void* b, void* out,
             void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace ember::sim::libs::conv
