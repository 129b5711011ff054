// The device side of the SIMT simulator as kernel code sees it: the built-in variables, barriers,
// warp collectives, atomics and intrinsics CUDA C++ provides, declared here for the host compiler.
// Force-included (through prelude.h) into every .cu file of the simulator build
// (-DEMBER_CUDA_SIM=ON), and included by core/cuda/kernel.cuh there. Implementations: sim/*.cpp.
//
// Each CUDA thread is a fiber; a block's fibers run cooperatively on one host thread, so a barrier
// or warp collective switches to the block's other threads until all of them have arrived. A check
// that fails (out-of-bounds or host memory, a shared-memory race, barrier divergence, a collective
// whose lanes disagree) reports the kernel, block, thread and address and ends the launch; the
// stream then carries a sticky error, as an illegal address does on a GPU.
#pragma once

#include <vector_types.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>
#include <driver_types.h>

namespace ember::sim {

// A launch's arguments, converted and copied once at launch (CUDA copies them into parameter
// memory); every simulated thread calls invoke(params), which copies them into the kernel's
// parameters on its own stack.
struct KernelBody {
  void (*invoke)(const void* params) = nullptr;
  std::shared_ptr<const void> params;
  size_t param_bytes = 0;
};
template <class Kernel, class Tuple>
struct PackedLaunch {
  Kernel kernel;
  Tuple args;
};
template <class P>
void invoke_packed(const void* params) {
  const P& p = *static_cast<const P*>(params);
  std::apply(p.kernel, p.args);
}
template <class Kernel, class Tuple>
KernelBody kernel_body(Kernel kernel, Tuple args) {
  using P = PackedLaunch<Kernel, Tuple>;
  std::shared_ptr<const P> p = std::make_shared<const P>(P{kernel, std::move(args)});
  return KernelBody{&invoke_packed<P>, p, sizeof(P)};
}

// Queues the grid on `stream` (checks the launch configuration first; a bad one sets the error
// cudaGetLastError reports, as a <<<>>> launch does).
void launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, KernelBody body);

// kernel<<<grid, block, dynamic_smem, stream>>>(args...): the arguments are converted to the
// kernel's parameter types here, as a `<<<>>>` launch converts them. Returns what
// cudaGetLastError() then returns (and clears): cudaSuccess, or why the launch was refused.
template <class... Params, class... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
                          Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch_kernel: wrong number of kernel arguments");
  launch(reinterpret_cast<const void*>(kernel), grid, block, dynamic_smem, stream,
         kernel_body(kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)));
  return cudaGetLastError();
}

// ---- built-in variables ----
uint3 thread_idx();
uint3 block_idx();
dim3 block_dim();
dim3 grid_dim();

// ---- shared memory ----
// The static __shared__ object declared at `site` (one per declaration and template instance),
// allocated in the block's shared memory the first time a thread of the block reaches it.
void* static_shared_raw(const void* site, size_t bytes, size_t align, const char* name);
template <class T>
T& static_shared(const void* site, const char* name) {
  constexpr size_t align = alignof(T) < 16 ? 16 : alignof(T);
  return *static_cast<T*>(static_shared_raw(site, sizeof(T), align, name));
}
void* dynamic_shared(const char* name);
// What kernel code declares shared memory with (CUDA's `__shared__` cannot be simulated):
//   EMBER_SIM_SHARED(float[32][33], tile);  a static __shared__ object, 16-byte aligned
//   EMBER_SIM_DYNAMIC_SHARED(float, buf);   the launch's dynamic shared memory as `float buf[]`
// ember's kernels write EMBER_SHARED / EMBER_DYNAMIC_SHARED (core/cuda/kernel.cuh), which are these
// in the simulator build.
#define EMBER_SIM_SHARED(type, name)                  \
  static constexpr char ember_shared_site_##name = 0; \
  auto& name = ::ember::sim::static_shared<std::type_identity_t<type>>(&ember_shared_site_##name, #name)
#define EMBER_SIM_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::ember::sim::dynamic_shared(#name))
// The shared-state-space address of a generic pointer into shared memory (offset in the block's
// shared memory), as cvta.to.shared gives it.
uint32_t shared_offset(const void* p, std::source_location loc);

// ---- barriers and warp collectives ----
enum class Collective : uint8_t { syncwarp, shfl, shfl_up, shfl_down, shfl_xor, ballot, any, all, match };
void syncthreads(std::source_location loc);
int syncthreads_reduce(int op, int pred, std::source_location loc);  // op: 0 count, 1 and, 2 or
void syncwarp(unsigned mask, std::source_location loc);
// Lane values of up to 16 bytes exchanged among the lanes named in `mask`.
void shuffle(Collective kind, unsigned mask, const void* in, void* out, size_t bytes, int arg, int width,
             std::source_location loc);
unsigned vote(Collective kind, unsigned mask, int pred, std::source_location loc);

// ---- tensor cores and async copies (kernels/common/ptx.cuh) ----
void cp_async(void* smem_dst, const void* gmem_src, int copy_bytes, int src_bytes, std::source_location loc);
void cp_async_commit();
void cp_async_wait(int n);
void ldmatrix(uint32_t* r, int count, const void* row, bool trans, std::source_location loc);
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16, std::source_location loc);

// ---- whole vector accesses (Note [whole vector accesses] in kernels/common/aligned_vec.cuh) ----
// Copies `bytes` from src to dst, checking and counting each side as one access of `bytes` bytes
// made by the caller's code address (a thread's own stack is neither checked nor counted).
void vector_copy(void* dst, const void* src, size_t bytes);

[[noreturn]] void trap(std::source_location loc);

}  // namespace ember::sim

// ---- CUDA C++'s device built-ins, for the host compiler ----

// (threadIdx, blockIdx, blockDim, gridDim and warpSize are macros of prelude.h, for kernel code only.)

inline void __syncthreads(std::source_location loc = std::source_location::current()) {
  ::ember::sim::syncthreads(loc);
}
inline int __syncthreads_count(int pred, std::source_location loc = std::source_location::current()) {
  return ::ember::sim::syncthreads_reduce(0, pred, loc);
}
inline int __syncthreads_and(int pred, std::source_location loc = std::source_location::current()) {
  return ::ember::sim::syncthreads_reduce(1, pred, loc);
}
inline int __syncthreads_or(int pred, std::source_location loc = std::source_location::current()) {
  return ::ember::sim::syncthreads_reduce(2, pred, loc);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location loc = std::source_location::current()) {
  ::ember::sim::syncwarp(mask, loc);
}

#define EMBER_SIM_SHUFFLE(name, kind, argtype)                                                                       \
  template <class T>                                                                                                 \
  inline T name(unsigned mask, T var, argtype arg, int width = 32,                                                   \
                std::source_location loc = std::source_location::current()) {                                        \
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, #name ": a value of at most 16 bytes");        \
    T out;                                                                                                           \
    ::ember::sim::shuffle(::ember::sim::Collective::kind, mask, &var, &out, sizeof(T), static_cast<int>(arg), width, \
                          loc);                                                                                      \
    return out;                                                                                                      \
  }
EMBER_SIM_SHUFFLE(__shfl_sync, shfl, int)
EMBER_SIM_SHUFFLE(__shfl_up_sync, shfl_up, unsigned)
EMBER_SIM_SHUFFLE(__shfl_down_sync, shfl_down, unsigned)
EMBER_SIM_SHUFFLE(__shfl_xor_sync, shfl_xor, int)
#undef EMBER_SIM_SHUFFLE

inline unsigned __ballot_sync(unsigned mask, int pred, std::source_location loc = std::source_location::current()) {
  return ::ember::sim::vote(::ember::sim::Collective::ballot, mask, pred, loc);
}
inline int __any_sync(unsigned mask, int pred, std::source_location loc = std::source_location::current()) {
  return static_cast<int>(::ember::sim::vote(::ember::sim::Collective::any, mask, pred, loc));
}
inline int __all_sync(unsigned mask, int pred, std::source_location loc = std::source_location::current()) {
  return static_cast<int>(::ember::sim::vote(::ember::sim::Collective::all, mask, pred, loc));
}

// Atomics: checked as atomic accesses (never a race with one another), then done with a real host
// atomic, so blocks running in parallel on different host threads see each other's updates.
// Implemented in sim/device_functions.cpp, outside the instrumented kernel code.
#define EMBER_SIM_ATOMIC_INTS(name)                  \
  int name(int* address, int val);                   \
  unsigned name(unsigned* address, unsigned val);    \
  long long name(long long* address, long long val); \
  unsigned long long name(unsigned long long* address, unsigned long long val);
EMBER_SIM_ATOMIC_INTS(atomicAdd)
EMBER_SIM_ATOMIC_INTS(atomicSub)
EMBER_SIM_ATOMIC_INTS(atomicExch)
EMBER_SIM_ATOMIC_INTS(atomicMax)
EMBER_SIM_ATOMIC_INTS(atomicMin)
EMBER_SIM_ATOMIC_INTS(atomicAnd)
EMBER_SIM_ATOMIC_INTS(atomicOr)
EMBER_SIM_ATOMIC_INTS(atomicXor)
#undef EMBER_SIM_ATOMIC_INTS
float atomicAdd(float* address, float val);
double atomicAdd(double* address, double val);
float atomicExch(float* address, float val);
int atomicCAS(int* address, int compare, int val);
unsigned atomicCAS(unsigned* address, unsigned compare, unsigned val);
unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare, unsigned long long val);
unsigned short atomicCAS(unsigned short* address, unsigned short compare, unsigned short val);

// ---- intrinsics: the host's IEEE operations (the fast-math variants are exact here) ----
inline float __int_as_float(int v) { return std::bit_cast<float>(v); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __uint_as_float(unsigned v) { return std::bit_cast<float>(v); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline double __longlong_as_double(long long v) { return std::bit_cast<double>(v); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
// (__expf and __logf: glibc's <math.h> declares them; sim/device_functions.cpp defines them)
float rsqrtf(float x);
double rsqrt(double x);
float __fdividef(float a, float b);
float __saturatef(float x);
// The C++ overload cuda_runtime.h declares for nvcc only: a kernel's address as the function.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

// min and max as CUDA's math library overloads them (mixed signed/unsigned compare as unsigned).
#define EMBER_SIM_MINMAX(A, B, R)                                                                                  \
  inline R min(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); } \
  inline R max(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(b) : static_cast<R>(a); }
EMBER_SIM_MINMAX(int, int, int)
EMBER_SIM_MINMAX(unsigned, unsigned, unsigned)
EMBER_SIM_MINMAX(int, unsigned, unsigned)
EMBER_SIM_MINMAX(unsigned, int, unsigned)
EMBER_SIM_MINMAX(long, long, long)
EMBER_SIM_MINMAX(unsigned long, unsigned long, unsigned long)
EMBER_SIM_MINMAX(long long, long long, long long)
EMBER_SIM_MINMAX(unsigned long long, unsigned long long, unsigned long long)
EMBER_SIM_MINMAX(long long, unsigned long long, unsigned long long)
EMBER_SIM_MINMAX(unsigned long long, long long, unsigned long long)
#undef EMBER_SIM_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

// CUDA's math library puts these in the global namespace (the f-suffixed ones come from <math.h>).
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(static_cast<unsigned>(v)); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline unsigned __brev(unsigned v) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline size_t __cvta_generic_to_shared(const void* p, std::source_location loc = std::source_location::current()) {
  return ::ember::sim::shared_offset(p, loc);
}
[[noreturn]] inline void __trap(std::source_location loc = std::source_location::current()) { ::ember::sim::trap(loc); }
