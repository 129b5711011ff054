// cuBLAS and cuBLASLt as the simulator emulates them (Note [simulated vendor libraries] in
// common.h): the calls kernels/gemm/gemm_vendor.cu makes and their obvious pairs, with the
// signatures of NVIDIA's own cublas_v2.h / cublasLt.h. Each call checks its arguments against the
// documented contract and returns the documented status (the reason goes to libs::last_error()
// and into cublasGetStatusString's text); the GEMMs run as simulated kernels (gemm.cu) on the
// handle's or the call's stream, at the worst numerics the configuration permits.
//
// Note [simulated cublas]:
// - Handles and descriptors live in a registry of live objects, so a destroyed or garbage handle is
//   refused (CUBLAS_STATUS_NOT_INITIALIZED for library handles, CUBLAS_STATUS_INVALID_VALUE for
//   descriptors) without reading freed memory. cuBLASLt's semi-opaque structs hold their state in
//   their data[] arrays (copied in and out with memcpy).
// - cublasCreate allocates device memory with cudaMalloc, as the real library does, so it fails
//   (CUBLAS_STATUS_ALLOC_FAILED) during a stream capture; cublasLtCreate is host only. A handle is
//   tied to the device current at its creation; computing with another device current is refused
//   (CUBLAS_STATUS_INVALID_VALUE: the documentation only says the context is tied to the device).
// - cuBLAS GEMMs with K >= 64 split K in 4 slices when workspace allows (partials in f32, or in
//   f16/bf16 where the math mode permits reduced-precision reductions). The workspace is the one
//   cublasSetWorkspace gave, or else the default pool, a 4 MiB cudaMalloc per stream made at the
//   first GEMM that wants one (so a captured GEMM needs cublasSetWorkspace first, as on a GPU);
//   cublasSetStream goes back to the default pool, as documented. Too little workspace: no split.
// - cuBLASLt's heuristic lists algorithms (Note [simulated cublasLt heuristic] below); the
//   algorithm decides split-K and its reduction scheme, hence the numerics.
// - The real libraries link their own CUDA runtime, so their failed runtime calls never show in
//   the application's cudaGetLastError: the emulation clears the errors its own calls caused.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/internal.h"
#include "sim/libs/common.h"
#include "sim/libs/gemm.h"
#include "sim/half.h"

using ember::sim::libs::Act;
using ember::sim::libs::Elem;
using ember::sim::libs::GemmArgs;
using ember::sim::libs::InRound;

namespace {

namespace libs = ember::sim::libs;

constexpr uint64_t kBlasMagic = 0x53414c4243'4d4953ull;  // handle tags, distinct per kind
constexpr uint64_t kLtMagic = 0x544c53414c42'4d53ull;
constexpr uint64_t kDescMagic = 0x4353454454'4c4d53ull;
constexpr uint64_t kLayoutMagic = 0x54554f59414c'4d53ull;
constexpr uint64_t kPrefMagic = 0x464552504c54'4d53ull;
constexpr uint64_t kAlgoMagic = 0x4f474c414c54'4d53ull;
constexpr size_t kDefaultPoolBytes = size_t{4} << 20;
constexpr int kSplitKSlices = 4;  // cuBLAS: K slices of a split-K GEMM
constexpr int64_t kSplitKMinK = 64;

cublasStatus_t refuse(cublasStatus_t st, std::string why) {
  libs::set_last_error(std::move(why));
  return st;
}

// ---- the registry of live handles and descriptors ----

enum class Kind : uint8_t { blas, lt, desc, layout, pref };
std::mutex g_mu;
std::unordered_map<const void*, Kind>& registry() {
  static auto* r = new std::unordered_map<const void*, Kind>();  // never destroyed: handles outlive statics
  return *r;
}
bool is_live(const void* p, Kind k) {
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = registry().find(p);
  return it != registry().end() && it->second == k;
}
void add_live(const void* p, Kind k) {
  std::lock_guard<std::mutex> lock(g_mu);
  registry()[p] = k;
}
void remove_live(const void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  registry().erase(p);
}

// cudaMalloc whose failure stays out of the application's cudaGetLastError (see the Note).
cudaError_t library_malloc(void** p, size_t bytes) {
  const cudaError_t before = cudaPeekAtLastError();
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess && before == cudaSuccess) static_cast<void>(cudaGetLastError());
  return e;
}

bool elem_of(cudaDataType t, Elem& e) {
  switch (t) {
    case CUDA_R_16F: e = Elem::f16; return true;
    case CUDA_R_16BF: e = Elem::bf16; return true;
    case CUDA_R_32F: e = Elem::f32; return true;
    case CUDA_R_64F: e = Elem::f64; return true;
    default: return false;
  }
}

std::string type_name(int t) {
  Elem e;
  if (elem_of(static_cast<cudaDataType>(t), e)) return libs::elem_name(e);
  return "cudaDataType " + std::to_string(t);
}

bool is_compute_type(int c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
    case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT:
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC: return true;
    default: return false;
  }
}

// The (A/B type, C type) pairs the cublasGemmEx table lists for a compute type (the floating-
// point ones ember can use; integer and complex types are not emulated).
bool types_supported(int compute, Elem ab, Elem c) {
  switch (compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: return ab == Elem::f16 && c == Elem::f16;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      return (ab == c && ab != Elem::f64) || ((ab == Elem::f16 || ab == Elem::bf16) && c == Elem::f32);
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32: return ab == Elem::f32 && c == Elem::f32;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: return ab == Elem::f64 && c == Elem::f64;
    default: return false;
  }
}
Elem acc_of(int compute) {
  switch (compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: return Elem::f16;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: return Elem::f64;
    default: return Elem::f32;
  }
}
// alpha and beta: the compute type's scalar (cuBLAS); cuBLASLt's scale type must be the same.
Elem scale_of(int compute) { return acc_of(compute); }
cudaDataType scale_cuda_type(int compute) {
  const Elem e = scale_of(compute);
  return e == Elem::f16 ? CUDA_R_16F : e == Elem::f64 ? CUDA_R_64F : CUDA_R_32F;
}

// A host scalar (pointer mode host) of type e.
double read_scalar(const void* p, Elem e) {
  switch (e) {
    case Elem::f16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return ember::sim::f16_to_float(h);
    }
    case Elem::f64: {
      double d;
      std::memcpy(&d, p, sizeof d);
      return d;
    }
    default: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
  }
}
bool is_device_memory(const void* p) {
  const ember::sim::Allocation* al = ember::sim::find_allocation(reinterpret_cast<uintptr_t>(p));
  return al != nullptr && al->kind == ember::sim::MemKind::device;
}

// The elements a strided batch of column-major rows x cols matrices spans: [lo, hi).
void matrix_extent(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch, int64_t& lo, int64_t& hi) {
  const int64_t last = (batch - 1) * stride;
  lo = std::min<int64_t>(0, last);
  hi = std::max<int64_t>(0, last) + (cols - 1) * ld + rows;
}
bool matrix_ok(const void* p, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch, Elem e) {
  if (rows == 0 || cols == 0 || batch == 0) return true;
  if (p == nullptr) return false;
  int64_t lo, hi;
  matrix_extent(rows, cols, ld, stride, batch, lo, hi);
  const auto es = static_cast<int64_t>(libs::elem_bytes(e));
  return libs::device_span_ok(static_cast<const char*>(p) + lo * es, static_cast<size_t>((hi - lo) * es));
}
// Whether the batches of an output overlap: they must not (stacked one after the other, or
// interleaved inside one column stride).
bool batches_overlap(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  if (batch <= 1 || rows == 0 || cols == 0) return false;
  const int64_t s = stride < 0 ? -stride : stride;
  if (s >= (cols - 1) * ld + rows) return false;
  if (s >= rows && (batch - 1) * s + rows <= ld) return false;
  return true;
}

std::string dims(int64_t a, int64_t b) { return std::to_string(a) + " x " + std::to_string(b); }

// Launches the GEMM, turning a launch failure into the documented status.
cublasStatus_t run(const char* fn, const GemmArgs& g, cudaStream_t stream) {
  try {
    libs::enqueue_gemm(g, stream);
  } catch (const std::exception& e) {
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED, std::string(fn) + ": launching the GEMM failed: " + e.what());
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

// ================================ cuBLAS ================================

// cublas_api.h declares cublasHandle_t as a pointer to this.
struct cublasContext {
  uint64_t magic = kBlasMagic;
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  void* internal = nullptr;  // what cublasCreate allocates on the device
  bool user_workspace = false;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<cudaStream_t, void*> pools;  // the default workspace pool, per stream, made lazily
};

namespace {

cublasStatus_t check_handle(const char* fn, cublasHandle_t h) {
  if (!is_live(h, Kind::blas) || h->magic != kBlasMagic)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED,
                  std::string(fn) + ": the handle was not made by cublasCreate or was destroyed");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t check_device(const char* fn, int device) {
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, std::string(fn) + ": cudaGetDevice failed");
  if (cur != device)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(fn) + ": the handle belongs to device " +
                                                   std::to_string(device) + " but device " + std::to_string(cur) +
                                                   " is current (a handle is tied to the device it was created on)");
  return CUBLAS_STATUS_SUCCESS;
}

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }
const char* op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : "T"; }

bool valid_gemm_algo(int algo) {
  return algo == CUBLAS_GEMM_DEFAULT || (algo >= CUBLAS_GEMM_ALGO0 && algo <= CUBLAS_GEMM_ALGO23) ||
         (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

// A cuBLAS GEMM's numerics: the worst the compute type and the handle's math mode allow.
void set_numerics(GemmArgs& g, const cublasContext& h, cublasComputeType_t compute) {
  const int base_mode = h.mode & 0xf;
  const bool disallow_reduced = (h.mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) != 0;
  g.acc = acc_of(compute);
  if (g.at == Elem::f32) {
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) g.in = InRound::tf32;
    else if (compute == CUBLAS_COMPUTE_32F_FAST_16F) g.in = InRound::f16;
    else if (compute == CUBLAS_COMPUTE_32F_FAST_16BF) g.in = InRound::bf16;
    else if (compute == CUBLAS_COMPUTE_32F && base_mode == CUBLAS_TF32_TENSOR_OP_MATH) g.in = InRound::tf32;
    else if (compute == CUBLAS_COMPUTE_32F && base_mode == CUBLAS_TENSOR_OP_MATH) g.in = InRound::f16;  // = FAST_16F
  }
  g.partials_in_output = (g.ct == Elem::f16 || g.ct == Elem::bf16) && g.acc == Elem::f32 &&
                         compute != CUBLAS_COMPUTE_32F_PEDANTIC && !disallow_reduced;
}

// Split-K in kSplitKSlices slices where the workspace allows: the one cublasSetWorkspace gave, or else the stream's
// default pool, made here at the first GEMM that wants one.
cublasStatus_t plan_split_k(const std::string& f, cublasHandle_t h, GemmArgs& g) {
  g.splits = kSplitKSlices;
  const size_t need = g.work_bytes();
  if (h->user_workspace) {
    if (h->workspace_bytes >= need) g.work = h->workspace;
  } else {
    void*& pool = h->pools[h->stream];
    if (pool == nullptr) {
      if (cudaError_t e = library_malloc(&pool, kDefaultPoolBytes); e != cudaSuccess) {
        pool = nullptr;
        return refuse(CUBLAS_STATUS_ALLOC_FAILED,
                      f + ": allocating the default workspace pool with cudaMalloc failed (" + cudaGetErrorString(e) +
                          "; during a stream capture set a workspace with cublasSetWorkspace first)");
      }
    }
    if (kDefaultPoolBytes >= need) g.work = pool;
  }
  if (g.work == nullptr) g.splits = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t blas_gemm(const char* fn, cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                         int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda, long long sA,
                         const void* B, cudaDataType Btype, int ldb, long long sB, const void* beta, void* C,
                         cudaDataType Ctype, int ldc, long long sC, int batch, cublasComputeType_t compute,
                         cublasGemmAlgo_t algo) {
  libs::set_last_error("");
  const std::string f = fn;
  if (cublasStatus_t st = check_handle(fn, h); st != CUBLAS_STATUS_SUCCESS) return st;
  if (cublasStatus_t st = check_device(fn, h->device); st != CUBLAS_STATUS_SUCCESS) return st;
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": negative size (m " + std::to_string(m) + ", n " +
                                                   std::to_string(n) + ", k " + std::to_string(k) + ", batchCount " +
                                                   std::to_string(batch) + ")");
  if (!valid_op(transa) || !valid_op(transb))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  f + ": transa/transb must be CUBLAS_OP_N, CUBLAS_OP_T or CUBLAS_OP_C (got " + std::to_string(transa) +
                      ", " + std::to_string(transb) + ")");
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (lda < std::max<int64_t>(1, a_rows))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": lda " + std::to_string(lda) + " < max(1, " +
                                                   std::to_string(a_rows) + ") (A is " + dims(a_rows, a_cols) +
                                                   " with transa " + op_name(transa) + ")");
  if (ldb < std::max<int64_t>(1, b_rows))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": ldb " + std::to_string(ldb) + " < max(1, " +
                                                   std::to_string(b_rows) + ") (B is " + dims(b_rows, b_cols) +
                                                   " with transb " + op_name(transb) + ")");
  if (ldc < std::max(1, m))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  f + ": ldc " + std::to_string(ldc) + " < max(1, m = " + std::to_string(m) + ")");
  if (alpha == nullptr || beta == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": alpha or beta is NULL");
  if (!valid_gemm_algo(algo))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, f + ": algo " + std::to_string(algo) + " is not a cublasGemmAlgo_t");
  Elem at, bt, ct;
  if (!elem_of(Atype, at) || !elem_of(Btype, bt) || !elem_of(Ctype, ct) || at != bt ||
      !types_supported(compute, at, ct))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, f + ": Atype " + type_name(Atype) + ", Btype " + type_name(Btype) +
                                                   ", Ctype " + type_name(Ctype) + " with computeType " +
                                                   std::to_string(compute) + " is not in the cublasGemmEx table");
  if (batches_overlap(m, n, ldc, sC, batch))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": strideC " + std::to_string(sC) + " makes the " +
                                                   std::to_string(batch) + " C matrices (" + dims(m, n) + ", ldc " +
                                                   std::to_string(ldc) + ") overlap");
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  if (is_device_memory(alpha) || is_device_memory(beta))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  f + ": alpha/beta point to device memory but the pointer mode is CUBLAS_POINTER_MODE_HOST");
  const Elem st = scale_of(compute);
  GemmArgs g;
  g.m = m, g.n = n, g.k = k, g.batch = batch, g.ta = ta, g.tb = tb;
  g.alpha = read_scalar(alpha, st), g.beta = read_scalar(beta, st);
  g.a = A, g.lda = lda, g.sa = sA, g.at = at;
  g.b = B, g.ldb = ldb, g.sb = sB, g.bt = bt;
  g.c = C, g.ldc = ldc, g.sc = sC, g.ct = ct;
  g.d = C, g.ldd = ldc, g.sd = sC, g.dt = ct;
  const bool product = k > 0 && g.alpha != 0;
  if (product && !matrix_ok(A, a_rows, a_cols, lda, sA, batch, at))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": A is not device memory of the current device holding its " +
                                                   std::to_string(batch) + " matrices");
  if (product && !matrix_ok(B, b_rows, b_cols, ldb, sB, batch, bt))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": B is not device memory of the current device holding its " +
                                                   std::to_string(batch) + " matrices");
  if (!matrix_ok(C, m, n, ldc, sC, batch, ct))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, f + ": C is not device memory of the current device holding its " +
                                                   std::to_string(batch) + " matrices");
  if (!product) g.k = 0;

  set_numerics(g, *h, compute);
  if (g.k >= kSplitKMinK)
    if (cublasStatus_t st = plan_split_k(f, h, g); st != CUBLAS_STATUS_SUCCESS) return st;
  return run(fn, g, h->stream);
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  libs::set_last_error("");
  if (handle == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: handle == NULL");
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate: the CUDA runtime could not be initialised");
  void* internal = nullptr;
  if (cudaError_t e = library_malloc(&internal, 4096); e != cudaSuccess)
    return refuse(CUBLAS_STATUS_ALLOC_FAILED, std::string("cublasCreate: cudaMalloc of the library's device resources "
                                                          "failed (") +
                                                  cudaGetErrorString(e) + "; not allowed during a stream capture)");
  auto* h = new cublasContext();
  h->device = dev;
  h->internal = internal;
  add_live(h, Kind::blas);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  libs::set_last_error("");
  if (cublasStatus_t st = check_handle("cublasDestroy", handle); st != CUBLAS_STATUS_SUCCESS) return st;
  remove_live(handle);
  // releasing the resources synchronises the device (documented)
  int cur = -1;
  cudaGetDevice(&cur);
  cudaSetDevice(handle->device);
  const cudaError_t before = cudaPeekAtLastError();
  cudaDeviceSynchronize();
  for (auto& [stream, pool] : handle->pools) cudaFree(pool);
  cudaFree(handle->internal);
  if (before == cudaSuccess) static_cast<void>(cudaGetLastError());
  cudaSetDevice(cur);
  handle->magic = 0;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  libs::set_last_error("");
  if (cublasStatus_t st = check_handle("cublasSetStream", handle); st != CUBLAS_STATUS_SUCCESS) return st;
  handle->stream = streamId;
  // "unconditionally resets the cuBLAS library workspace back to the default workspace pool"
  handle->user_workspace = false;
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  libs::set_last_error("");
  if (cublasStatus_t st = check_handle("cublasGetStream", handle); st != CUBLAS_STATUS_SUCCESS) return st;
  if (streamId == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGetStream: streamId == NULL");
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  libs::set_last_error("");
  if (cublasStatus_t st = check_handle("cublasSetMathMode", handle); st != CUBLAS_STATUS_SUCCESS) return st;
  const unsigned base =
      static_cast<unsigned>(mode) & ~static_cast<unsigned>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  switch (base) {
    case CUBLAS_DEFAULT_MATH:
    case CUBLAS_TENSOR_OP_MATH:
    case CUBLAS_PEDANTIC_MATH:
    case CUBLAS_TF32_TENSOR_OP_MATH:
    case CUBLAS_FP32_EMULATED_BF16X9_MATH:
    case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH: break;
    default:
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    "cublasSetMathMode: " + std::to_string(mode) + " is not a cublasMath_t");
  }
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  libs::set_last_error("");
  if (cublasStatus_t st = check_handle("cublasGetMathMode", handle); st != CUBLAS_STATUS_SUCCESS) return st;
  if (mode == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGetMathMode: mode == NULL");
  *mode = handle->mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  libs::set_last_error("");
  if (cublasStatus_t st = check_handle("cublasSetWorkspace", handle); st != CUBLAS_STATUS_SUCCESS) return st;
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace: the workspace pointer is not aligned to 256 bytes");
  if (workspaceSizeInBytes > 0 && !libs::device_span_ok(workspace, workspaceSizeInBytes))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace: the workspace is not " +
                                                   std::to_string(workspaceSizeInBytes) +
                                                   " bytes of device memory of the current device");
  handle->user_workspace = true;
  handle->workspace = workspaceSizeInBytes > 0 ? workspace : nullptr;
  handle->workspace_bytes = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return blas_gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                   Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  return blas_gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B,
                   Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

// The status's description and, after a failed call on this thread, the emulation's reason (the
// real library has no way to say which rule a call broke; ember prints this text on failures).
const char* cublasGetStatusString(cublasStatus_t status) {
  const char* what = "unknown status";
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: what = "success"; break;
    case CUBLAS_STATUS_NOT_INITIALIZED: what = "the library was not initialized"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: what = "the resource allocation failed"; break;
    case CUBLAS_STATUS_INVALID_VALUE: what = "an invalid value was used as an argument"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: what = "an absent device architectural feature is required"; break;
    case CUBLAS_STATUS_MAPPING_ERROR: what = "an access to GPU memory space failed"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: what = "the GPU program failed to execute"; break;
    case CUBLAS_STATUS_INTERNAL_ERROR: what = "an internal operation failed"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: what = "the functionality requested is not supported"; break;
    case CUBLAS_STATUS_LICENSE_ERROR: what = "license error"; break;
  }
  thread_local std::string text;
  const std::string why = libs::last_error();
  text = status == CUBLAS_STATUS_SUCCESS || why.empty() ? std::string(what)
                                                        : std::string(what) + " [simulator: " + why + "]";
  return text.c_str();
}

}  // extern "C"

// ================================ cuBLASLt ================================

// cublasLt.h declares cublasLtHandle_t as a pointer to this.
struct cublasLtContext {
  uint64_t magic = kLtMagic;
  int device = 0;
};

namespace {

// The state each semi-opaque struct holds in its data[] array.
struct DescState {
  uint64_t magic;
  int32_t compute, scale_type, pointer_mode, transa, transb, transc, fill_mode;
  uint32_t epilogue;
  const void* bias;
  int64_t bias_stride;
  int32_t bias_type;
  int32_t sm_count;
  int8_t fast_accum;
};
struct LayoutState {
  uint64_t magic;
  uint32_t type;
  int32_t order;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  uint32_t batch_mode;
  int64_t stride;
  int64_t plane_offset;
};
struct PrefState {
  uint64_t magic;
  uint32_t search_mode, reduction_mask;
  uint64_t max_workspace;
  uint32_t align[4];  // A, B, C, D
  float max_waves;
  uint64_t impl_mask;
};
struct AlgoState {
  uint64_t magic;
  int32_t id;
  uint32_t tile;
  int32_t splitk;
  uint32_t reduction;
  uint32_t swizzle, custom, stages;
  uint16_t inner, cluster;
  uint16_t align;  // bytes every matrix pointer, leading dimension and batch stride must be a multiple of
  int32_t compute, ab_type, cd_type;
};
static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(PrefState) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(AlgoState) <= sizeof(cublasLtMatmulAlgo_t));

template <class S, class O>
S load(const O* o) {
  S s;
  std::memcpy(&s, o->data, sizeof s);
  return s;
}
template <class S, class O>
void store(O* o, const S& s) {
  std::memcpy(o->data, &s, sizeof s);
}

// One attribute of a state struct: where it is and its size (nullptr: unknown attribute).
struct Field {
  void* p = nullptr;
  size_t size = 0;
};
template <class T>
Field field(T& v) {
  return {&v, sizeof v};
}

cublasStatus_t set_field(const std::string& fn, int attr, Field f, const void* buf, size_t size) {
  if (f.p == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": attribute " + std::to_string(attr) + " is unknown or not emulated");
  if (buf == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": buf == NULL");
  if (size != f.size)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": attribute " + std::to_string(attr) + " takes " +
                                                   std::to_string(f.size) + " bytes, sizeInBytes is " +
                                                   std::to_string(size));
  std::memcpy(f.p, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t get_field(const std::string& fn, int attr, Field f, void* buf, size_t size, size_t* written) {
  if (f.p == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": attribute " + std::to_string(attr) + " is unknown or not emulated");
  if (size == 0) {
    if (written == nullptr)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": sizeInBytes is 0 and sizeWritten is NULL");
    *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": buf == NULL");
  if (size != f.size)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": attribute " + std::to_string(attr) + " has " +
                                                   std::to_string(f.size) + " bytes, sizeInBytes is " +
                                                   std::to_string(size));
  std::memcpy(buf, f.p, size);
  if (written != nullptr) *written = f.size;
  return CUBLAS_STATUS_SUCCESS;
}

Field desc_field(DescState& s, cublasLtMatmulDescAttributes_t a) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field(s.compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field(s.scale_type);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field(s.pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA: return field(s.transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return field(s.transb);
    case CUBLASLT_MATMUL_DESC_TRANSC: return field(s.transc);
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return field(s.fill_mode);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return field(s.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field(s.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return field(s.bias_stride);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field(s.bias_type);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return field(s.sm_count);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return field(s.fast_accum);
    default: return {};
  }
}
Field layout_field(LayoutState& s, cublasLtMatrixLayoutAttribute_t a) {
  switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return field(s.type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return field(s.order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return field(s.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return field(s.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return field(s.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field(s.batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return field(s.stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return field(s.plane_offset);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return field(s.batch_mode);
    default: return {};
  }
}
Field pref_field(PrefState& s, cublasLtMatmulPreferenceAttributes_t a) {
  switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field(s.search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field(s.max_workspace);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return field(s.reduction_mask);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field(s.align[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field(s.align[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field(s.align[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field(s.align[3]);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return field(s.max_waves);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return field(s.impl_mask);
    default: return {};
  }
}
Field algo_field(AlgoState& s, cublasLtMatmulAlgoConfigAttributes_t a) {
  switch (a) {
    case CUBLASLT_ALGO_CONFIG_ID: return field(s.id);
    case CUBLASLT_ALGO_CONFIG_TILE_ID: return field(s.tile);
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: return field(s.splitk);
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME: return field(s.reduction);
    case CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING: return field(s.swizzle);
    case CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION: return field(s.custom);
    case CUBLASLT_ALGO_CONFIG_STAGES_ID: return field(s.stages);
    case CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID: return field(s.inner);
    case CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID: return field(s.cluster);
    default: return {};
  }
}

bool emulated_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}
bool known_epilogue(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_RELU_AUX:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DRELU:
    case CUBLASLT_EPILOGUE_DRELU_BGRAD:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: return true;
    default: return false;
  }
}
bool valid_scheme(uint32_t r) {
  return r == CUBLASLT_REDUCTION_SCHEME_NONE || r == CUBLASLT_REDUCTION_SCHEME_INPLACE ||
         r == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE || r == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
}

cublasStatus_t check_lt(const char* fn, cublasLtHandle_t h) {
  if (!is_live(h, Kind::lt) || h->magic != kLtMagic)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED,
                  std::string(fn) + ": the handle was not made by cublasLtCreate or was destroyed");
  return CUBLAS_STATUS_SUCCESS;
}
template <class O>
cublasStatus_t check_object(const std::string& fn, const O* o, Kind k, uint64_t magic, const char* what) {
  if (!is_live(o, k) || o->data[0] != magic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": " + what + " is NULL, was not created or was destroyed");
  return CUBLAS_STATUS_SUCCESS;
}

// A matmul as the descriptors describe it, checked.
struct LtProblem {
  DescState desc;
  LayoutState l[4];  // A, B, C, D
  Elem e[4];
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool ta = false, tb = false;
  Act act = Act::none;
  bool bias = false;
  Elem bias_type = Elem::f32;
};

// One layout (who: "<fn>: A's layout") checked on its own; e: its element type.
cublasStatus_t check_layout(const std::string& who, const LayoutState& l, Elem& e) {
  if (!elem_of(static_cast<cudaDataType>(l.type), e))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  who + " has type " + type_name(static_cast<int>(l.type)) + " (not emulated)");
  if (l.order != CUBLASLT_ORDER_COL || l.batch_mode != CUBLASLT_BATCH_MODE_STRIDED || l.plane_offset != 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, who + ": only column-major strided-batch layouts are emulated");
  if (l.rows > INT32_MAX || l.cols > INT32_MAX)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, who + " has " + std::to_string(l.rows) + " x " + std::to_string(l.cols) +
                                                   " elements (more than int32 rows or columns)");
  if (l.ld < std::max<int64_t>(1, static_cast<int64_t>(l.rows)))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, who + ": ld " + std::to_string(l.ld) + " < rows " +
                                                   std::to_string(l.rows) +
                                                   " (column-major: columns must not overlap)");
  return CUBLAS_STATUS_SUCCESS;
}

// m, n, k and the batch count from the four layouts and the transposes, which must make one matmul.
cublasStatus_t derive_shape(const std::string& fn, LtProblem& p) {
  static const char* const names[4] = {"A", "B", "C", "D"};
  const DescState& d = p.desc;
  p.ta = d.transa != CUBLAS_OP_N;
  p.tb = d.transb != CUBLAS_OP_N;
  const auto rows = [&](int i) { return static_cast<int64_t>(p.l[i].rows); };
  const auto cols = [&](int i) { return static_cast<int64_t>(p.l[i].cols); };
  p.m = p.ta ? cols(0) : rows(0);
  p.k = p.ta ? rows(0) : cols(0);
  const int64_t kb = p.tb ? cols(1) : rows(1);
  p.n = p.tb ? rows(1) : cols(1);
  if (kb != p.k || rows(2) != p.m || cols(2) != p.n || rows(3) != p.m || cols(3) != p.n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the layouts do not make a matmul: op(A) is " + dims(p.m, p.k) +
                                                   ", op(B) " + dims(kb, p.n) + ", C " + dims(rows(2), cols(2)) +
                                                   ", D " + dims(rows(3), cols(3)));
  p.batch = p.l[3].batch;
  for (int i = 0; i < 4; ++i)
    if (p.l[i].batch != p.l[3].batch)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": batch counts differ (" + names[i] + " " +
                                                     std::to_string(p.l[i].batch) + ", D " +
                                                     std::to_string(p.l[3].batch) + ")");
  if (batches_overlap(p.m, p.n, p.l[3].ld, p.l[3].stride, p.batch))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": D's batch stride " + std::to_string(p.l[3].stride) +
                                                   " makes its " + std::to_string(p.batch) + " matrices overlap");
  return CUBLAS_STATUS_SUCCESS;
}

// The descriptor's settings that are emulated: types, scale type, epilogue and its bias.
cublasStatus_t check_desc(const std::string& fn, LtProblem& p) {
  const DescState& d = p.desc;
  if (d.transc != CUBLAS_OP_N || d.fill_mode != CUBLAS_FILL_MODE_FULL)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": only TRANSC = N and FILL_MODE = FULL are supported");
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": only CUBLASLT_POINTER_MODE_HOST is emulated");
  if (p.e[0] != p.e[1] || p.e[2] != p.e[3] || !types_supported(d.compute, p.e[0], p.e[3]) ||
      d.compute == CUBLAS_COMPUTE_32F_EMULATED_16BFX9)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": A/B/C/D types " + libs::elem_name(p.e[0]) + "/" +
                                                   libs::elem_name(p.e[1]) + "/" + libs::elem_name(p.e[2]) + "/" +
                                                   libs::elem_name(p.e[3]) + " with compute type " +
                                                   std::to_string(d.compute) + " are not supported");
  if (d.scale_type != scale_cuda_type(d.compute))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": scale type " + type_name(d.scale_type) + " with compute type " +
                                                   std::to_string(d.compute) + " is not supported");
  if (!emulated_epilogue(d.epilogue))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": epilogue " + std::to_string(d.epilogue) + " is not emulated");
  p.bias = (d.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
  p.act = (d.epilogue & CUBLASLT_EPILOGUE_RELU)   ? Act::relu
          : (d.epilogue & CUBLASLT_EPILOGUE_GELU) ? Act::gelu
                                                  : Act::none;
  if (p.bias) {
    if (d.bias == nullptr)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": a BIAS epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if (d.bias_type == -1) p.bias_type = p.e[3];
    else if (!elem_of(static_cast<cudaDataType>(d.bias_type), p.bias_type) ||
             (p.bias_type != p.e[3] && !(p.bias_type == Elem::f32 && acc_of(d.compute) == Elem::f32)))
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": bias type " + type_name(d.bias_type) + " with D of type " +
                                                     libs::elem_name(p.e[3]) + " is not supported");
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t analyze(const char* fn_c, cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t A,
                       cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, LtProblem& p) {
  const std::string fn = fn_c;
  if (cublasStatus_t st = check_lt(fn_c, h); st != CUBLAS_STATUS_SUCCESS) return st;
  if (cublasStatus_t st = check_object(fn, op, Kind::desc, kDescMagic, "the matmul descriptor");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  const cublasLtMatrixLayout_t ls[4] = {A, B, C, D};
  static const char* const names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i)
    if (cublasStatus_t st =
            check_object(fn, ls[i], Kind::layout, kLayoutMagic, (std::string("the layout of ") + names[i]).c_str());
        st != CUBLAS_STATUS_SUCCESS)
      return st;
  p.desc = load<DescState>(op);
  for (int i = 0; i < 4; ++i) {
    p.l[i] = load<LayoutState>(ls[i]);
    if (cublasStatus_t st = check_layout(fn + ": " + names[i] + "'s layout", p.l[i], p.e[i]);
        st != CUBLAS_STATUS_SUCCESS)
      return st;
  }
  if (cublasStatus_t st = derive_shape(fn, p); st != CUBLAS_STATUS_SUCCESS) return st;
  return check_desc(fn, p);
}

// Note [simulated cublasLt heuristic]: two kinds of kernels, a tensor-core one (ID 66) that needs
// every pointer, leading dimension and batch stride 16-byte aligned and a SIMT one (ID 3) that
// needs element alignment; each without split-K (no workspace) and with 4, 8 and 16 K-slices
// (workspace: the partials, slices * m * n * batch in the reduction's type). A split-K candidate
// takes the worst reduction scheme the preference's mask allows (OUTPUT_TYPE, then INPLACE, then
// COMPUTE_TYPE; none if the mask allows no scheme). Where K dwarfs the output (K >= 8 max(m, n), or
// m n <= 4096 with K >= 128) only split-K configurations are listed, as an H200 did for bf16
// [64,3136] -> 128; where K >= 2 max(m, n) they come first. Candidates needing more alignment than
// the preference's MIN_ALIGNMENT_*_BYTES, or more workspace than MAX_WORKSPACE_BYTES, are left out.
constexpr int32_t kTensorAlgo = 66, kSimtAlgo = 3;

uint32_t worst_scheme(uint32_t mask) {
  if (mask & CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE) return CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  if (mask & CUBLASLT_REDUCTION_SCHEME_INPLACE) return CUBLASLT_REDUCTION_SCHEME_INPLACE;
  if (mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) return CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  return CUBLASLT_REDUCTION_SCHEME_NONE;
}

size_t algo_workspace(const LtProblem& p, const AlgoState& a) {
  if (a.splitk <= 1) return 0;
  const Elem pt = a.reduction == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? acc_of(p.desc.compute) : p.e[3];
  return static_cast<size_t>(a.splitk) * static_cast<size_t>(p.m) * static_cast<size_t>(p.n) *
         static_cast<size_t>(p.batch) * libs::elem_bytes(pt);
}

// Whether every leading dimension and batch stride (in bytes) is a multiple of `align`.
bool layouts_aligned(const LtProblem& p, uint32_t align) {
  for (int i = 0; i < 4; ++i) {
    const auto es = static_cast<int64_t>(libs::elem_bytes(p.e[i]));
    if ((p.l[i].ld * es) % align != 0) return false;
    if (p.batch > 1 && (p.l[i].stride * es) % align != 0) return false;
  }
  return true;
}

float waves(const LtProblem& p, const AlgoState& a) {
  const int64_t tile = a.tile == CUBLASLT_MATMUL_TILE_128x128 ? 128 : 64;
  const int64_t ctas = ((p.m + tile - 1) / tile) * ((p.n + tile - 1) / tile) * p.batch * std::max(1, a.splitk);
  return static_cast<float>(ctas) / 132.f;
}

std::vector<AlgoState> candidates(const LtProblem& p, const PrefState& pref) {
  std::vector<AlgoState> out;
  const int64_t big = std::max(p.m, p.n);
  const bool only_split = p.k >= 8 * big || (p.m * p.n <= 4096 && p.k >= 128);
  const bool split_first = only_split || p.k >= 2 * big;
  const uint32_t scheme = worst_scheme(pref.reduction_mask);
  const uint32_t elem_align = static_cast<uint32_t>(
      libs::elem_bytes(p.e[0]) > libs::elem_bytes(p.e[3]) ? libs::elem_bytes(p.e[0]) : libs::elem_bytes(p.e[3]));
  for (const int32_t id : {kTensorAlgo, kSimtAlgo}) {
    AlgoState a{};
    a.magic = kAlgoMagic;
    a.id = id;
    a.align = static_cast<uint16_t>(id == kTensorAlgo ? 16 : elem_align);
    a.tile = p.m * p.n >= 128 * 128 ? CUBLASLT_MATMUL_TILE_128x128 : CUBLASLT_MATMUL_TILE_64x64;
    a.stages = CUBLASLT_MATMUL_STAGES_64x3;
    a.compute = p.desc.compute;
    a.ab_type = static_cast<int32_t>(p.l[0].type);
    a.cd_type = static_cast<int32_t>(p.l[3].type);
    bool fits = layouts_aligned(p, a.align);
    for (int i = 0; i < 4; ++i) fits = fits && pref.align[i] >= a.align;
    if (!fits) continue;
    std::vector<AlgoState> unsplit, split;
    a.splitk = 1;
    a.reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (!only_split) unsplit.push_back(a);
    if (scheme != CUBLASLT_REDUCTION_SCHEME_NONE)
      for (const int s : {4, 8, 16}) {
        if (p.k < 2 * s) continue;
        a.splitk = s;
        a.reduction = scheme;
        split.push_back(a);
      }
    const auto& first = split_first ? split : unsplit;
    const auto& second = split_first ? unsplit : split;
    for (const auto* list : {&first, &second})
      for (const AlgoState& c : *list)
        if (algo_workspace(p, c) <= pref.max_workspace) out.push_back(c);
  }
  return out;
}

PrefState default_pref() {
  PrefState s{};
  s.magic = kPrefMagic;
  s.search_mode = CUBLASLT_SEARCH_BEST_FIT;
  s.reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  s.max_workspace = 0;
  for (uint32_t& a : s.align) a = 256;
  s.impl_mask = ~uint64_t{0};
  return s;
}

// Whether `a` can compute the problem; its workspace size.
cublasStatus_t check_algo(const std::string& fn, const LtProblem& p, const cublasLtMatmulAlgo_t* algo, AlgoState& a,
                          size_t& workspace) {
  if (algo == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": algo == NULL");
  a = load<AlgoState>(algo);
  if (a.magic != kAlgoMagic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the algo was not initialised by cublasLtMatmulAlgoGetHeuristic");
  if (a.compute != p.desc.compute || a.ab_type != static_cast<int32_t>(p.l[0].type) ||
      a.cd_type != static_cast<int32_t>(p.l[3].type))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the algo was made for another compute type or other data types");
  if (a.splitk < 1 || !valid_scheme(a.reduction))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the algo's SPLITK_NUM " + std::to_string(a.splitk) +
                                                   " or REDUCTION_SCHEME " + std::to_string(a.reduction) +
                                                   " is invalid");
  if (a.splitk > 1 && a.reduction == CUBLASLT_REDUCTION_SCHEME_NONE)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": SPLITK_NUM " + std::to_string(a.splitk) + " needs a REDUCTION_SCHEME other than NONE");
  if (a.splitk > 1 && a.splitk > p.k)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fn + ": SPLITK_NUM " + std::to_string(a.splitk) + " > k " + std::to_string(p.k));
  if (!layouts_aligned(p, a.align))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fn + ": the algo needs leading dimensions and batch strides that are multiples of " +
                      std::to_string(a.align) + " bytes");
  workspace = algo_workspace(p, a);
  return CUBLAS_STATUS_SUCCESS;
}

uint32_t pointer_alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p) | 256;
  return static_cast<uint32_t>(v & (~v + 1));
}

// The algorithm of a cublasLtMatmul: `algo`, or when it is NULL the heuristic's first choice for this workspace and
// these pointers (A, B, C, D); checked against the problem, the workspace and the pointers' alignment.
cublasStatus_t matmul_algo(const std::string& fn, const LtProblem& p, const cublasLtMatmulAlgo_t* algo,
                           const void* const ptrs[4], void* workspace, size_t workspace_bytes, AlgoState& a) {
  cublasLtMatmulAlgo_t chosen;
  if (algo == nullptr) {
    PrefState pref = default_pref();
    pref.max_workspace = workspace_bytes;
    for (int i = 0; i < 4; ++i) pref.align[i] = pointer_alignment(ptrs[i]);
    const std::vector<AlgoState> list = candidates(p, pref);
    if (list.empty())
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": no algorithm for these pointers and this workspace");
    store(&chosen, list.front());
    algo = &chosen;
  }
  size_t need = 0;
  if (cublasStatus_t st = check_algo(fn, p, algo, a, need); st != CUBLAS_STATUS_SUCCESS) return st;
  // cublasLt.h: INVALID_VALUE "when workspaceSizeInBytes is less than workspace required by configured algo"
  if (workspace_bytes < need)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the algo needs " + std::to_string(need) +
                                                   " bytes of workspace, workspaceSizeInBytes is " +
                                                   std::to_string(workspace_bytes));
  if (need > 0 && !libs::device_span_ok(workspace, need))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the workspace is not " + std::to_string(need) +
                                                   " bytes of device memory of the current device");
  // the alignment the algo was chosen for (the heuristic honoured the MIN_ALIGNMENT preferences).
  // cublasLt.h: a successful cublasLtMatmulAlgoCheck "doesn't fully guarantee algo will run (will
  // fail if e.g. buffers are not correctly aligned)"; of cublasLtMatmul's statuses NOT_SUPPORTED
  // ("doesn't support configured operation") fits, so that is the one returned.
  static const char* const names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i)
    if (ptrs[i] != nullptr && pointer_alignment(ptrs[i]) < a.align)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": " + names[i] + " is " +
                                                     std::to_string(pointer_alignment(ptrs[i])) +
                                                     "-byte aligned, the algo needs " + std::to_string(a.align));
  return CUBLAS_STATUS_SUCCESS;
}

// The GEMM the problem describes on these operands, before its numerics.
GemmArgs lt_gemm_args(const LtProblem& p, const void* alpha, const void* beta, const void* A, const void* B,
                      const void* C, void* D) {
  const Elem st = scale_of(p.desc.compute);
  GemmArgs g;
  g.m = p.m, g.n = p.n, g.k = p.k, g.batch = p.batch, g.ta = p.ta, g.tb = p.tb;
  g.alpha = read_scalar(alpha, st), g.beta = read_scalar(beta, st);
  g.a = A, g.lda = p.l[0].ld, g.sa = p.l[0].stride, g.at = p.e[0];
  g.b = B, g.ldb = p.l[1].ld, g.sb = p.l[1].stride, g.bt = p.e[1];
  g.c = C, g.ldc = p.l[2].ld, g.sc = p.l[2].stride, g.ct = p.e[2];
  g.d = D, g.ldd = p.l[3].ld, g.sd = p.l[3].stride, g.dt = p.e[3];
  return g;
}

// Every operand the GEMM reads or writes is device memory of the current device (A and B only when there is a
// product to form, C only when beta reads it).
cublasStatus_t check_operands(const std::string& fn, const LtProblem& p, const GemmArgs& g, bool product) {
  const int64_t a_rows = static_cast<int64_t>(p.l[0].rows), a_cols = static_cast<int64_t>(p.l[0].cols);
  const int64_t b_rows = static_cast<int64_t>(p.l[1].rows), b_cols = static_cast<int64_t>(p.l[1].cols);
  if (product && !matrix_ok(g.a, a_rows, a_cols, g.lda, g.sa, g.batch, g.at))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": A is not device memory of the current device holding its matrices");
  if (product && !matrix_ok(g.b, b_rows, b_cols, g.ldb, g.sb, g.batch, g.bt))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": B is not device memory of the current device holding its matrices");
  if (g.beta != 0 && !matrix_ok(g.c, g.m, g.n, g.ldc, g.sc, g.batch, g.ct))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": C is not device memory of the current device holding its matrices");
  if (!matrix_ok(g.d, g.m, g.n, g.ldd, g.sd, g.batch, g.dt))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": D is not device memory of the current device holding its matrices");
  if (p.bias && !matrix_ok(p.desc.bias, g.m, 1, g.m, p.desc.bias_stride, g.batch, p.bias_type))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the bias is not device memory of the current device holding " +
                                                   std::to_string(g.m) + " entries per batch");
  return CUBLAS_STATUS_SUCCESS;
}

// A cuBLASLt GEMM's numerics, split-K and epilogue: the compute type's and the algorithm's.
void set_lt_numerics(GemmArgs& g, const LtProblem& p, const AlgoState& a, void* workspace) {
  g.acc = acc_of(p.desc.compute);
  if (g.at == Elem::f32) {
    if (p.desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32) g.in = InRound::tf32;
    else if (p.desc.compute == CUBLAS_COMPUTE_32F_FAST_16F) g.in = InRound::f16;
    else if (p.desc.compute == CUBLAS_COMPUTE_32F_FAST_16BF) g.in = InRound::bf16;
  }
  g.splits = a.splitk > 1 ? a.splitk : 1;
  g.partials_in_output =
      a.reduction == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE || a.reduction == CUBLASLT_REDUCTION_SCHEME_INPLACE;
  g.work = g.splits > 1 ? workspace : nullptr;
  if (p.bias) {
    g.bias = p.desc.bias;
    g.biast = p.bias_type;
    g.bias_stride = p.desc.bias_stride;
  }
  g.act = p.act;
}

}  // namespace

extern "C" {

// The emulation answers for the headers it was built with (CUBLAS_VERSION).
size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  libs::set_last_error("");
  if (lightHandle == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: lightHandle == NULL");
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate: the CUDA runtime could not be initialised");
  auto* h = new cublasLtContext();
  h->device = dev;
  add_live(h, Kind::lt);
  *lightHandle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  libs::set_last_error("");
  if (cublasStatus_t st = check_lt("cublasLtDestroy", lightHandle); st != CUBLAS_STATUS_SUCCESS) return st;
  remove_live(lightHandle);
  lightHandle->magic = 0;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  libs::set_last_error("");
  if (matmulDesc == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: matmulDesc == NULL");
  if (!is_compute_type(computeType))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "cublasLtMatmulDescCreate: " + std::to_string(computeType) + " is not a cublasComputeType_t");
  DescState s{};
  s.magic = kDescMagic;
  s.compute = computeType;
  s.scale_type = scaleType;
  s.pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  s.transa = s.transb = s.transc = CUBLAS_OP_N;
  s.fill_mode = CUBLAS_FILL_MODE_FULL;
  s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  s.bias_type = -1;
  auto* d = new cublasLtMatmulDescOpaque_t{};
  store(d, s);
  add_live(d, Kind::desc);
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  libs::set_last_error("");
  if (matmulDesc == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (cublasStatus_t st =
          check_object("cublasLtMatmulDescDestroy", matmulDesc, Kind::desc, kDescMagic, "the descriptor");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  remove_live(matmulDesc);
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatmulDescSetAttribute";
  if (cublasStatus_t st = check_object(fn, matmulDesc, Kind::desc, kDescMagic, "the descriptor");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  DescState s = load<DescState>(matmulDesc);
  if (cublasStatus_t st = set_field(fn, attr, desc_field(s, attr), buf, sizeInBytes); st != CUBLAS_STATUS_SUCCESS)
    return st;
  const auto bad = [&](const std::string& what) { return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": " + what); };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      if (!is_compute_type(s.compute)) return bad(std::to_string(s.compute) + " is not a cublasComputeType_t");
      break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      if (s.pointer_mode < 0 || s.pointer_mode > CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST)
        return bad(std::to_string(s.pointer_mode) + " is not a cublasLtPointerMode_t");
      break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      const int32_t t = attr == CUBLASLT_MATMUL_DESC_TRANSA ? s.transa : s.transb;
      if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C) return bad(std::to_string(t) + " is not N, T or C");
      break;
    }
    case CUBLASLT_MATMUL_DESC_TRANSC:
      if (s.transc != CUBLAS_OP_N) return bad("TRANSC must be CUBLAS_OP_N");
      break;
    case CUBLASLT_MATMUL_DESC_FILL_MODE:
      if (s.fill_mode < CUBLAS_FILL_MODE_LOWER || s.fill_mode > CUBLAS_FILL_MODE_FULL)
        return bad(std::to_string(s.fill_mode) + " is not a cublasFillMode_t");
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (!known_epilogue(s.epilogue)) return bad(std::to_string(s.epilogue) + " is not a cublasLtEpilogue_t");
      break;
    default: break;
  }
  store(matmulDesc, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatmulDescGetAttribute";
  if (cublasStatus_t st = check_object(fn, matmulDesc, Kind::desc, kDescMagic, "the descriptor");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  DescState s = load<DescState>(matmulDesc);
  return get_field(fn, attr, desc_field(s, attr), buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  libs::set_last_error("");
  if (matLayout == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: matLayout == NULL");
  LayoutState s{};
  s.magic = kLayoutMagic;
  s.type = static_cast<uint32_t>(type);
  s.order = CUBLASLT_ORDER_COL;
  s.rows = rows;
  s.cols = cols;
  s.ld = ld;
  s.batch = 1;
  s.batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
  auto* l = new cublasLtMatrixLayoutOpaque_t{};
  store(l, s);
  add_live(l, Kind::layout);
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  libs::set_last_error("");
  if (matLayout == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (cublasStatus_t st =
          check_object("cublasLtMatrixLayoutDestroy", matLayout, Kind::layout, kLayoutMagic, "the layout");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  remove_live(matLayout);
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatrixLayoutSetAttribute";
  if (cublasStatus_t st = check_object(fn, matLayout, Kind::layout, kLayoutMagic, "the layout");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  LayoutState s = load<LayoutState>(matLayout);
  if (cublasStatus_t st = set_field(fn, attr, layout_field(s, attr), buf, sizeInBytes); st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && s.batch < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": BATCH_COUNT " + std::to_string(s.batch) + " < 1");
  if (attr == CUBLASLT_MATRIX_LAYOUT_LD && s.ld < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": LD " + std::to_string(s.ld) + " is negative");
  if (attr == CUBLASLT_MATRIX_LAYOUT_ORDER && (s.order < CUBLASLT_ORDER_COL || s.order > CUBLASLT_ORDER_COL32_2R_4R4))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": " + std::to_string(s.order) + " is not a cublasLtOrder_t");
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_MODE && s.batch_mode > CUBLASLT_BATCH_MODE_POINTER_ARRAY)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": " + std::to_string(s.batch_mode) + " is not a cublasLtBatchMode_t");
  store(matLayout, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatrixLayoutGetAttribute";
  if (cublasStatus_t st = check_object(fn, matLayout, Kind::layout, kLayoutMagic, "the layout");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  LayoutState s = load<LayoutState>(matLayout);
  return get_field(fn, attr, layout_field(s, attr), buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  libs::set_last_error("");
  if (pref == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: pref == NULL");
  auto* p = new cublasLtMatmulPreferenceOpaque_t{};
  store(p, default_pref());
  add_live(p, Kind::pref);
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  libs::set_last_error("");
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (cublasStatus_t st =
          check_object("cublasLtMatmulPreferenceDestroy", pref, Kind::pref, kPrefMagic, "the preference");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  remove_live(pref);
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatmulPreferenceSetAttribute";
  if (cublasStatus_t st = check_object(fn, pref, Kind::pref, kPrefMagic, "the preference"); st != CUBLAS_STATUS_SUCCESS)
    return st;
  PrefState s = load<PrefState>(pref);
  if (cublasStatus_t st = set_field(fn, attr, pref_field(s, attr), buf, sizeInBytes); st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (attr == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK &&
      (s.reduction_mask & ~uint32_t{CUBLASLT_REDUCTION_SCHEME_MASK}))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": reduction scheme mask " + std::to_string(s.reduction_mask) +
                                                   " has bits outside CUBLASLT_REDUCTION_SCHEME_MASK");
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE && s.search_mode > CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": search mode " + std::to_string(s.search_mode) + " is reserved");
  store(pref, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatmulPreferenceGetAttribute";
  if (cublasStatus_t st = check_object(fn, pref, Kind::pref, kPrefMagic, "the preference"); st != CUBLAS_STATUS_SUCCESS)
    return st;
  PrefState s = load<PrefState>(pref);
  return get_field(fn, attr, pref_field(s, attr), buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  libs::set_last_error("");
  const char* fn = "cublasLtMatmulAlgoGetHeuristic";
  if (returnAlgoCount != nullptr) *returnAlgoCount = 0;
  LtProblem p;
  if (cublasStatus_t st = analyze(fn, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, p);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (cublasStatus_t st = check_object(fn, preference, Kind::pref, kPrefMagic, "the preference");
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (requestedAlgoCount <= 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  std::string(fn) + ": requestedAlgoCount " + std::to_string(requestedAlgoCount) + " <= 0");
  if (heuristicResultsArray == nullptr || returnAlgoCount == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(fn) + ": heuristicResultsArray or returnAlgoCount is NULL");
  const PrefState pref = load<PrefState>(preference);
  if (pref.search_mode != CUBLASLT_SEARCH_BEST_FIT)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string(fn) + ": only CUBLASLT_SEARCH_BEST_FIT is emulated");
  const std::vector<AlgoState> list = candidates(p, pref);
  const int count = std::min<int>(requestedAlgoCount, static_cast<int>(list.size()));
  for (int i = 0; i < count; ++i) {
    cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[i];
    r = cublasLtMatmulHeuristicResult_t{};
    store(&r.algo, list[static_cast<size_t>(i)]);
    r.workspaceSize = algo_workspace(p, list[static_cast<size_t>(i)]);
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = waves(p, list[static_cast<size_t>(i)]);
  }
  *returnAlgoCount = count;
  if (count == 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  std::string(fn) + ": no algorithm fits the preference (alignments " + std::to_string(pref.align[0]) +
                      "/" + std::to_string(pref.align[1]) + "/" + std::to_string(pref.align[2]) + "/" +
                      std::to_string(pref.align[3]) + " bytes, workspace " + std::to_string(pref.max_workspace) +
                      " bytes, reduction scheme mask " + std::to_string(pref.reduction_mask) + ")");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatmulAlgoConfigSetAttribute";
  if (algo == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": algo == NULL");
  AlgoState s = load<AlgoState>(algo);
  if (s.magic != kAlgoMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the algo was not initialised");
  if (attr == CUBLASLT_ALGO_CONFIG_ID)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": CUBLASLT_ALGO_CONFIG_ID is read-only");
  if (cublasStatus_t st = set_field(fn, attr, algo_field(s, attr), buf, sizeInBytes); st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM && s.splitk < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": SPLITK_NUM " + std::to_string(s.splitk) + " < 1");
  if (attr == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME && !valid_scheme(s.reduction))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": " + std::to_string(s.reduction) + " is not one reduction scheme");
  if (attr == CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING && s.swizzle > 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": CTA_SWIZZLING must be 0 or 1");
  store(algo, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  libs::set_last_error("");
  const std::string fn = "cublasLtMatmulAlgoConfigGetAttribute";
  if (algo == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": algo == NULL");
  AlgoState s = load<AlgoState>(algo);
  if (s.magic != kAlgoMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": the algo was not initialised");
  return get_field(fn, attr, algo_field(s, attr), buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result) {
  libs::set_last_error("");
  const char* fn = "cublasLtMatmulAlgoCheck";
  LtProblem p;
  if (cublasStatus_t st = analyze(fn, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, p);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (result == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(fn) + ": result == NULL");
  AlgoState a;
  size_t ws = 0;
  if (cublasStatus_t st = check_algo(fn, p, algo, a, ws); st != CUBLAS_STATUS_SUCCESS) return st;
  // the algo field is never updated (result->algo may be *algo)
  result->workspaceSize = ws;
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = waves(p, a);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  libs::set_last_error("");
  const char* fn_c = "cublasLtMatmul";
  const std::string fn = fn_c;
  LtProblem p;
  if (cublasStatus_t st = analyze(fn_c, lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, p);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (cublasStatus_t st = check_device(fn_c, lightHandle->device); st != CUBLAS_STATUS_SUCCESS) return st;
  if (alpha == nullptr || beta == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": alpha or beta is NULL");
  if (is_device_memory(alpha) || is_device_memory(beta))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": alpha/beta point to device memory but the pointer mode is CUBLASLT_POINTER_MODE_HOST");
  if (C == D && std::memcmp(&p.l[2], &p.l[3], sizeof(LayoutState)) != 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": in place (C == D) needs identical C and D layouts");

  const void* const ptrs[4] = {A, B, C, D};
  AlgoState a;
  if (cublasStatus_t st = matmul_algo(fn, p, algo, ptrs, workspace, workspaceSizeInBytes, a);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  GemmArgs g = lt_gemm_args(p, alpha, beta, A, B, C, D);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  const bool product = g.k > 0 && g.alpha != 0;
  if (cublasStatus_t st = check_operands(fn, p, g, product); st != CUBLAS_STATUS_SUCCESS) return st;
  if (!product) g.k = 0;
  set_lt_numerics(g, p, a, workspace);
  return run(fn_c, g, stream);
}

}  // extern "C"
