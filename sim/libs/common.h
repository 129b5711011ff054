// What the simulator's emulations of cuBLAS, cuBLASLt and cuDNN share (cublas.cpp, cudnn.cpp and
// their kernels): element types, the worst numerics a configuration allows, the call counter that
// makes a permitted nondeterministic order differ from call to call, the reason of the last refusal
// and the device-pointer check. Simulator build only. Not for other code.
//
// Note [simulated vendor libraries]: ember's cuBLAS, cuBLASLt and cuDNN variants compile against
// NVIDIA's real headers; in the simulator build the symbols come from sim/libs/
// (cublas.cpp, cudnn.cpp, cudnn_ops.cpp), which emulate the calls ember makes:
// - each call checks its arguments against the contract NVIDIA documents and returns the status
//   the documentation names for a violation (the reason goes to last_error(), which
//   cudnnGetLastErrorString also returns);
// - a call that computes enqueues simulated kernels (the .cu files here) on the stream the handle
//   or the call names, so stream order, graph capture and replay, and the simulator's bounds and
//   initialisation checks apply to the library's work as to ember's own kernels; calls that
//   allocate device memory or synchronise (cublasCreate, cudnnCreate, cudnnFind*) do so through the
//   simulated runtime, so they fail during a capture as they would on a GPU;
// - results follow the library's definition (column-major GEMM, cross-correlation, the pooling,
//   softmax and batch-norm formulas), written independently of ember's kernels, at the worst
//   numerics the configuration permits: TF32 inputs where a math or compute type allows tensor
//   cores on f32 data, split-K partial sums reduced in the output type where the reduction scheme
//   or math mode allows it, a different summation order on every call where an algorithm is
//   nondeterministic;
// - algorithm queries return plausible lists: algorithms that need workspace, ones that are not
//   supported for the shape, nondeterministic ones and, for f32, ones listed with TF32-permitting
//   math, so ember's selection, caching and fallbacks all run.
// docs/simulator.md lists the calls and the rules each one checks.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "sim/half.h"

namespace ember::sim::libs {

// The element types the emulated calls take (cudaDataType_t / cudnnDataType_t mapped onto these).
enum class Elem : uint8_t { f16, bf16, f32, f64 };

inline size_t elem_bytes(Elem e) { return e == Elem::f64 ? 8 : e == Elem::f32 ? 4 : 2; }
inline const char* elem_name(Elem e) {
  switch (e) {
    case Elem::f16: return "f16";
    case Elem::bf16: return "bf16";
    case Elem::f32: return "f32";
    case Elem::f64: return "f64";
  }
  return "?";
}

// Reads and writes one element as double (exact for every element type).
//
// Note [unchecked vendor loads]: the emulated kernels read their operands without the simulator's
// per-access check (the attribute below keeps the compiler's instrumentation out of this function),
// because a naive GEMM or convolution makes two loads per multiply-add and the checks made the
// vendor variants several times slower than ember's own kernels in CI. What still holds: each call
// checks, when it is made, that every operand span lies in device memory of the right device; every
// store is checked when it runs; a read of memory nobody wrote still gives NaN (new allocations are
// filled with 0xff). What is lost: a read past the end of a tensor inside a larger cached block,
// or of memory freed between the call and its execution, is not reported for these kernels.
#if EMBER_CUDA_SIM
__attribute__((no_sanitize("kernel-address")))
#endif
inline double
load_elem(const void* base, int64_t i, Elem e) {
  switch (e) {
    case Elem::f16: return static_cast<double>(f16_to_float(static_cast<const uint16_t*>(base)[i]));
    case Elem::bf16: return static_cast<double>(bf16_to_float(static_cast<const uint16_t*>(base)[i]));
    case Elem::f32: return static_cast<double>(static_cast<const float*>(base)[i]);
    case Elem::f64: return static_cast<const double*>(base)[i];
  }
  return 0;
}
inline void store_elem(void* base, int64_t i, Elem e, double v) {
  switch (e) {
    case Elem::f16: static_cast<uint16_t*>(base)[i] = float_to_f16(static_cast<float>(v)); break;
    case Elem::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v)); break;
    case Elem::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case Elem::f64: static_cast<double*>(base)[i] = v; break;
  }
}

// Rounding to a narrower type, as the worst permitted numerics do it (round_f16 and round_bf16:
// sim/half.h).
// TF32: 10 explicit mantissa bits, round to nearest even (what tensor cores read of an f32).
inline float round_tf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;  // inf, NaN
  u += 0xfffu + ((u >> 13) & 1u);
  u &= 0xffffe000u;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
// Rounds `v` to the element type `e` (f64: unchanged).
inline double round_to(double v, Elem e) {
  switch (e) {
    case Elem::f16: return round_f16(static_cast<float>(v));
    case Elem::bf16: return round_bf16(static_cast<float>(v));
    case Elem::f32: return static_cast<float>(v);
    case Elem::f64: return v;
  }
  return v;
}

// A number that differs for every emulated call: where a library permits a nondeterministic
// reduction order (atomics), the emulation derives its order from it, so two identical calls
// differ in their last bits as they may on a GPU.
inline uint64_t next_call_seed() {
  static std::atomic<uint64_t> n{0x9e3779b97f4a7c15ull};
  return n.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed);
}
// A cheap mix of a seed and an index (a permutation-free shuffle key for reduction orders).
inline uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The library's per-thread "last error" text, for a test or a report to read after a failed call:
// every refusal says which rule it broke.
void set_last_error(std::string what);
std::string last_error();

// Whether `p` is device memory of the current device holding `bytes` from p on (the libraries take
// device pointers only; host pointers are undefined behaviour there, an error here).
bool device_span_ok(const void* p, size_t bytes);

}  // namespace ember::sim::libs
