// The simulated kernels behind the emulated cuBLAS and cuBLASLt GEMMs (gemm.cu): one description
// of a strided-batched column-major GEMM with its epilogue and the numerics to run it at, which
// cublas.cpp fills in after checking the call. Simulator build only. Not for other code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sim/libs/common.h"

namespace ember::sim::libs {

// What tensor cores (or a FAST compute type) read of an f32 input.
enum class InRound : uint8_t { none, tf32, f16, bf16 };
// The activation of a cuBLASLt epilogue (GELU: the tanh approximation, as cuBLASLt documents it).
enum class Act : uint8_t { none, relu, gelu };

// D = act(alpha * op(A) op(B) + beta * C + bias), column-major, `batch` matrices at fixed strides
// (in elements). op(A) is m x k, op(B) k x n, C and D m x n. C is read only when beta != 0, A and
// B only when alpha != 0 and k > 0 (the BLAS convention).
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool ta = false, tb = false;  // op(A) = A^T, op(B) = B^T
  const void* a = nullptr;
  int64_t lda = 0, sa = 0;
  Elem at = Elem::f32;
  const void* b = nullptr;
  int64_t ldb = 0, sb = 0;
  Elem bt = Elem::f32;
  const void* c = nullptr;
  int64_t ldc = 0, sc = 0;
  Elem ct = Elem::f32;
  void* d = nullptr;
  int64_t ldd = 0, sd = 0;
  Elem dt = Elem::f32;
  double alpha = 1, beta = 0;
  // numerics
  InRound in = InRound::none;  // rounding of every A and B element before the products
  Elem acc = Elem::f32;        // the accumulator: f32, f64, or f16 (rounded after every FMA)
  // split-K: K in `splits` slices, each accumulated alone into `work` (splits * m * n * batch
  // partials of type partial_type()), then summed in slice order. With partials_in_output the
  // partials are rounded to D's type and summed in it (rounded after every addition), otherwise
  // they stay in the accumulator's type. After a split-K reduction the epilogue (bias,
  // activation) works on alpha * sum + beta * C already rounded to D's type.
  int splits = 1;
  bool partials_in_output = false;
  void* work = nullptr;
  // epilogue
  const void* bias = nullptr;  // m entries per batch, added along rows; nullptr: none
  Elem biast = Elem::f32;
  int64_t bias_stride = 0;
  Act act = Act::none;

  Elem partial_type() const { return partials_in_output ? dt : acc; }
  // Bytes of `work` a split-K run needs (0 without split-K).
  size_t work_bytes() const {
    return splits > 1 ? static_cast<size_t>(splits) * static_cast<size_t>(m) * static_cast<size_t>(n) *
                            static_cast<size_t>(batch) * elem_bytes(partial_type())
                      : 0;
  }
};

// Enqueues the GEMM's kernels on `stream` (recorded as graph nodes while it captures). Throws
// std::runtime_error when a launch fails (sim/libs/launch.h).
void enqueue_gemm(const GemmArgs& g, cudaStream_t stream);

}  // namespace ember::sim::libs
