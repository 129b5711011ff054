// The blocked CPU GEMM behind matmul's "cpu_blocked" and linear's "cpu_fused" variants.
//
//   C[b] = act(A[b] B[b] + bias)     A [M, K], B [K, N], C [M, N], bias [N] (optional), per batch b
//
// A and B are read through any element strides (a transposed view is packed in place, no copy);
// C has unit column stride and any row stride. f32 and f64 compute in their own type; f16 and bf16
// are converted to f32 while packing, accumulate in f32 over the whole K and round once when the
// tile is written (like the reference loop, which accumulates in acc_t<T>).
//
// Design (GotoBLAS/BLIS): both operands are packed once per batch into zero-padded panels (A in
// MR-row panels, B in NR-column panels, each K deep and contiguous), then the output is cut into
// MC x NC tiles that the thread pool computes in parallel. Inside a tile the K dimension is walked
// in KC blocks; for each B sliver (KC x NR, ~16 KiB: stays in L1) every MR x NR micro-tile of the
// MC rows is computed by a register-blocked micro-kernel (the MC x KC block of A, <= 128 KiB, stays
// in L2). Bias, activation and the f16/bf16 rounding run on each micro-tile right after its last
// K block, while it is still in L1 (linear's fused epilogue).
//
// The micro-kernel is written once with GCC vector extensions and compiled for three ISAs, picked
// at run time: AVX-512 (f32 12x32 / f64 12x16, 24 zmm accumulators), AVX2+FMA (6x16 / 6x8, 12 ymm
// accumulators) and a portable 16-byte version (SSE2 on x86-64, NEON on arm64), picked at run time
// (AVX2 on AMD Zen 4, whose AVX-512 runs at half width). The library is built for baseline
// x86-64, so only these functions use the wider instructions.
#pragma once

#include <cstdint>
#include <string>

namespace ember::gemm {

template <class T>
struct CpuGemm {
  int64_t M = 0, N = 0, K = 0;
  const T* a = nullptr;
  int64_t a_rs = 0, a_cs = 0;  // element strides of A's rows (m) and columns (k)
  const T* b = nullptr;
  int64_t b_rs = 0, b_cs = 0;  // element strides of B's rows (k) and columns (n)
  T* c = nullptr;
  int64_t c_rs = 0;         // row stride of C (its column stride is 1)
  const T* bias = nullptr;  // [N] with stride bias_s, added to every row; nullptr: none
  int64_t bias_s = 1;
  int act = 0;  // 0 none, 1 relu, 2 gelu (exact erf form), as linear's Activation
  // Batches: element offsets of batch i are a_off[i], b_off[i], c_off[i] (nullptr: 0 for all).
  int64_t batch = 1;
  const int64_t* a_off = nullptr;
  const int64_t* b_off = nullptr;
  const int64_t* c_off = nullptr;
};

// Runs the GEMM on the calling thread and the pool (core/parallel.h). Instantiated for float,
// double, Half and BFloat16.
template <class T>
void cpu_gemm(const CpuGemm<T>& g);

// The micro-kernel ISA in use: "avx512", "avx2" or "generic" (default_cpu_isa() unless
// overridden). set_cpu_isa("") restores automatic choice; asking for an ISA the CPU lacks throws.
// For tests and benchmarks (every ISA path is checked against the reference loop).
std::string cpu_isa();
void set_cpu_isa(const std::string& isa);
// The ISAs this CPU can run, widest first.
std::string supported_cpu_isas();
// The ISA picked automatically: the widest, except AVX2 where AVX-512 runs at half rate (Zen 4).
std::string default_cpu_isa();

}  // namespace ember::gemm
