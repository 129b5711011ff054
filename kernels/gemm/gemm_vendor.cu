// The vendor GEMMs: cuBLAS (cublasGemmStridedBatchedEx) and cuBLASLt (cublasLtMatmul with
// epilogues), registered as kVendor variants so "ours vs vendor" is one benchmark and autotune can
// pick per shape.
//
// Numerics: f32 uses CUBLAS_COMPUTE_32F (pure FP32: TF32 is never allowed, so results compare with
// the CPU reference; run_cublas_tf32, the lab's peer of the TF32 wgmma GEMM, asks for
// CUBLAS_COMPUTE_32F_FAST_TF32 by name), f64 CUBLAS_COMPUTE_64F, f16/bf16 accumulate in f32 (CUBLAS_COMPUTE_32F) and
// cuBLAS's reduced-precision split-K reductions are disallowed. The bias is added by the library
// in f32 before the one rounding to the output dtype (cuBLAS: C prefilled with the bias and
// beta = 1; cuBLASLt: its BIAS epilogue), like ember's own kernels. GELU is not offered: cuBLASLt's
// GELU epilogue is the tanh approximation, not the exact erf form linear promises.
//
// Row-major to column-major: C [M, N] row-major is C^T [N, M] column-major, and C^T = B^T A^T, so
// cuBLAS gets m = N, n = M, with B as its first operand and A as its second; an operand whose k
// stride is 1 is passed with op T (see to_cublas below).
//
// Note [cuBLAS handles]: one cublasHandle_t / cublasLtHandle_t per (thread, device), created lazily
// and kept in a process-wide pool: a thread that ends gives its handles back for the next thread,
// nothing is destroyed (destroying at exit races with the CUDA context's teardown). The stream is
// set on every call; the workspace (32 MiB on sm_90, 4 MiB before, as NVIDIA recommends) comes from
// the caching allocator on the current stream, so it is graph-capture safe and costs no cudaMalloc
// in steady state. cuBLASLt's algorithm choice (its heuristic query) is cached per problem shape.
//
// Note [vendor handles in a capture]: a thread's first cuBLAS or cuDNN call may come inside a CUDA
// graph capture (a step captured without an eager warm-up on that thread, or on a new thread), and
// creating a handle allocates device memory: cudaMalloc, which a capture in global or thread-local
// mode refuses, invalidating the capture. So handles are created in relaxed capture mode
// (cuda::RelaxedCapture), as the caching allocator does its cudaMalloc: the allocation is not stream
// work and belongs to no graph. The simulator's cuBLAS and cuDNN allocate in cublasCreate and
// cudnnCreate as the libraries do; tests/test_gemm_gpu.cpp captures a new thread's first calls.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>

#include "core/cuda/device_guard.h"
#include "core/runtime.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/functional.h"
#include "kernels/gemm/gemm_common.cuh"

#define EMBER_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                              \
    cublasStatus_t ember_st_ = (expr);                                                              \
    if (ember_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                            \
      EMBER_FAIL("cuBLAS call ", #expr, " failed: ", cublasGetStatusString(ember_st_), " (status ", \
                 static_cast<int>(ember_st_), ")");                                                 \
  } while (0)

namespace ember::gemm {

namespace {

constexpr int kMaxDevices = 64;

// ---- handles (Note [cuBLAS handles]) ----

struct HandlePool {
  std::mutex mu;
  std::vector<cublasHandle_t> blas[kMaxDevices];
  std::vector<cublasLtHandle_t> lt[kMaxDevices];
};
HandlePool& pool() {
  static HandlePool* p = new HandlePool();  // never destroyed
  return *p;
}

struct ThreadHandles {
  cublasHandle_t blas[kMaxDevices] = {};
  cublasLtHandle_t lt[kMaxDevices] = {};
  ~ThreadHandles() {
    HandlePool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    for (int d = 0; d < kMaxDevices; ++d) {
      if (blas[d] != nullptr) p.blas[d].push_back(blas[d]);
      if (lt[d] != nullptr) p.lt[d].push_back(lt[d]);
    }
  }
};
thread_local ThreadHandles t_handles;

cublasHandle_t blas_handle(int dev) {
  EMBER_CHECK(dev >= 0 && dev < kMaxDevices, "cuBLAS: bad device ", dev);
  cublasHandle_t& h = t_handles.blas[dev];
  if (h != nullptr) return h;
  {
    HandlePool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.blas[dev].empty()) {
      h = p.blas[dev].back();
      p.blas[dev].pop_back();
      return h;
    }
  }
  cublasHandle_t created = nullptr;
  {
    cuda::RelaxedCapture relaxed;  // Note [vendor handles in a capture]
    EMBER_CUBLAS_CHECK(cublasCreate(&created));
  }
  // no TF32 for f32, no reduced-precision (f16) split-K reductions for f16 outputs
  EMBER_CUBLAS_CHECK(cublasSetMathMode(
      created, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  h = created;
  return h;
}

cublasLtHandle_t lt_handle(int dev) {
  EMBER_CHECK(dev >= 0 && dev < kMaxDevices, "cuBLASLt: bad device ", dev);
  cublasLtHandle_t& h = t_handles.lt[dev];
  if (h != nullptr) return h;
  {
    HandlePool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.lt[dev].empty()) {
      h = p.lt[dev].back();
      p.lt[dev].pop_back();
      return h;
    }
  }
  cublasLtHandle_t created = nullptr;
  {
    cuda::RelaxedCapture relaxed;  // Note [vendor handles in a capture]
    EMBER_CUBLAS_CHECK(cublasLtCreate(&created));
  }
  h = created;
  return h;
}

size_t workspace_bytes(int dev) {
  static std::mutex mu;
  static std::map<int, size_t> bytes;
  std::lock_guard<std::mutex> lock(mu);
  auto it = bytes.find(dev);
  if (it == bytes.end()) it = bytes.emplace(dev, cuda::properties(dev).major >= 9 ? (32u << 20) : (4u << 20)).first;
  return it->second;
}

Tensor workspace(const Problem& p) {
  return empty({static_cast<int64_t>(workspace_bytes(p.device.index))}, TensorOptions(DType::u8).device(p.device));
}

// ---- the problem in cuBLAS's terms ----

struct CublasView {
  cublasOperation_t ta, tb;  // ops on cuBLAS's A (our B) and B (our A)
  int64_t lda, ldb, ldc;     // leading dims of our B, our A, C
  cudaDataType_t type;
  cublasComputeType_t compute;
  size_t es;
};

CublasView to_cublas(const Problem& p) {
  CublasView v;
  if (p.b_cs == 1) {  // B row-major [K, N]: column-major it is B^T [N, K]
    v.ta = CUBLAS_OP_N;
    v.lda = p.b_rs;
  } else {  // B's k stride is 1: column-major it is B [K, N]
    v.ta = CUBLAS_OP_T;
    v.lda = p.b_cs;
  }
  if (p.a_cs == 1) {  // A row-major [M, K]: column-major A^T [K, M]
    v.tb = CUBLAS_OP_N;
    v.ldb = p.a_rs;
  } else {  // A's m stride is 1: column-major A [M, K]
    v.tb = CUBLAS_OP_T;
    v.ldb = p.a_cs;
  }
  v.ldc = p.c_rs;
  switch (p.dtype) {
    case DType::f32:
      v.type = CUDA_R_32F;
      v.compute = CUBLAS_COMPUTE_32F;
      break;
    case DType::f64:
      v.type = CUDA_R_64F;
      v.compute = CUBLAS_COMPUTE_64F;
      break;
    case DType::f16:
      v.type = CUDA_R_16F;
      v.compute = CUBLAS_COMPUTE_32F;
      break;
    case DType::bf16:
      v.type = CUDA_R_16BF;
      v.compute = CUBLAS_COMPUTE_32F;
      break;
    default: EMBER_FAIL("cuBLAS gemm: dtype ", p.dtype, " is not supported");
  }
  v.es = dtype_size(p.dtype);
  return v;
}

void check_int(const char* what, int64_t v) {
  EMBER_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuBLAS gemm: ", what, " = ", v,
              " does not fit the library's int arguments");
}

// The outer batches (all batch dims but the last) one call each; the last dim is strided-batched.
// With allow_broadcast false (cuBLASLt, whose strided batches are not documented for stride 0),
// a last dim that broadcasts an operand is looped over too.
struct BatchSplit {
  int64_t outer = 1, inner = 1;
  int64_t a_stride = 0, b_stride = 0;
  int outer_dims = 0;  // the batch dims looped over on the host
};
BatchSplit split_batch(const Problem& p, bool allow_broadcast) {
  BatchSplit s;
  if (p.nb == 0) return s;
  const int last = p.nb - 1;
  if (allow_broadcast || (p.a_bs[last] != 0 && p.b_bs[last] != 0)) {
    s.inner = p.bsize[last];
    s.a_stride = p.a_bs[last];
    s.b_stride = p.b_bs[last];
    s.outer_dims = last;
  } else {
    s.outer_dims = p.nb;
  }
  for (int d = 0; d < s.outer_dims; ++d) s.outer *= p.bsize[d];
  return s;
}
// Element offsets of A and B for outer batch o (over the first s.outer_dims batch dims).
void outer_offsets(const Problem& p, const BatchSplit& s, int64_t o, int64_t& ao, int64_t& bo) {
  ao = 0;
  bo = 0;
  for (int d = s.outer_dims - 1; d >= 0; --d) {
    int64_t i = o % p.bsize[d];
    o /= p.bsize[d];
    ao += i * p.a_bs[d];
    bo += i * p.b_bs[d];
  }
}

// ---- small kernels for the cuBLAS path's epilogue ----

template <class T>
__global__ void bias_fill_kernel(T* C, const T* bias, int64_t M, int64_t N, int64_t c_rs, int64_t c_bs, int64_t total) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i % N, m = (i / N) % M, z = i / (N * M);
    C[z * c_bs + m * c_rs + n] = bias[n];
  }
}

template <class T>
__global__ void relu_inplace_kernel(T* C, int64_t M, int64_t N, int64_t c_rs, int64_t c_bs, int64_t total) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i % N, m = (i / N) % M, z = i / (N * M);
    T* p = C + z * c_bs + m * c_rs + n;
    *p = static_cast<T>(dev::activate(static_cast<acc_t<T>>(*p), 1));
  }
}

// ---- cuBLASLt ----

template <class Desc, cublasStatus_t (*Destroy)(Desc)>
struct LtPtr {
  Desc d = nullptr;
  ~LtPtr() {
    if (d != nullptr) Destroy(d);
  }
};
using MatmulDesc = LtPtr<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LayoutDesc = LtPtr<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using PrefDesc = LtPtr<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// Largest power of two (<= 256) dividing the address and every byte stride given.
uint32_t alignment(const void* ptr, std::initializer_list<int64_t> byte_strides) {
  uint64_t g = reinterpret_cast<uintptr_t>(ptr) | 256;
  for (int64_t s : byte_strides)
    if (s != 0) g |= static_cast<uint64_t>(s);
  return static_cast<uint32_t>(g & (~g + 1));  // lowest set bit
}

std::mutex g_lt_mu;
std::map<std::string, cublasLtMatmulAlgo_t> g_lt_algos;

// One uint32 field of an algorithm's configuration (`fallback` if cuBLASLt does not say).
uint32_t algo_config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, uint32_t fallback) {
  uint32_t v = fallback;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return fallback;
  return v;
}

void cublas_gemm(const Problem& p, bool tf32) {
  const int64_t batch = p.batch();
  if (p.M == 0 || p.N == 0 || batch == 0) return;
  EMBER_CHECK(p.act == 0 || p.act == 1, "cuBLAS gemm: only the none and relu epilogues are offered, got act ", p.act);
  if (p.K == 0) {  // an empty sum: bias and activation only (cuBLAS would only scale C)
    run_naive(p);
    return;
  }
  CublasView v = to_cublas(p);
  if (tf32) v.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const BatchSplit bs = split_batch(p, true);
  check_int("M", p.M);
  check_int("N", p.N);
  check_int("K", p.K);
  check_int("lda", v.lda);
  check_int("ldb", v.ldb);
  check_int("ldc", v.ldc);
  check_int("batch count", bs.inner);
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  cublasHandle_t h = blas_handle(p.device.index);
  EMBER_CUBLAS_CHECK(cublasSetStream(h, stream));
  Tensor ws = workspace(p);
  EMBER_CUBLAS_CHECK(cublasSetWorkspace(h, ws.data_ptr(), static_cast<size_t>(ws.numel())));

  const int64_t total = batch * p.M * p.N;
  if (p.bias != nullptr) {
    EMBER_DISPATCH_FLOAT(p.dtype, "cuBLAS gemm bias", [&] {
      auto* C = static_cast<scalar_t*>(p.c);
      auto* bias = static_cast<const scalar_t*>(p.bias);
      unsigned grid = cuda::grid_for(total, 256, p.device.index);
      cuda::launch(bias_fill_kernel<scalar_t>, grid, 256, 0, stream, C, bias, p.M, p.N, p.c_rs, p.c_bs, total);
    });
  }
  const float alpha_f = 1.f, beta_f = p.bias != nullptr ? 1.f : 0.f;
  const double alpha_d = 1.0, beta_d = p.bias != nullptr ? 1.0 : 0.0;
  const void* alpha = p.dtype == DType::f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = p.dtype == DType::f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  for (int64_t o = 0; o < bs.outer; ++o) {
    int64_t ao, bo;
    outer_offsets(p, bs, o, ao, bo);
    const char* A = static_cast<const char*>(p.a) + ao * static_cast<int64_t>(v.es);
    const char* B = static_cast<const char*>(p.b) + bo * static_cast<int64_t>(v.es);
    char* C = static_cast<char*>(p.c) + o * bs.inner * p.c_bs * static_cast<int64_t>(v.es);
    EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, v.ta, v.tb, static_cast<int>(p.N), static_cast<int>(p.M), static_cast<int>(p.K), alpha, B, v.type,
        static_cast<int>(v.lda), bs.b_stride, A, v.type, static_cast<int>(v.ldb), bs.a_stride, beta, C, v.type,
        static_cast<int>(v.ldc), p.c_bs, static_cast<int>(bs.inner), v.compute, CUBLAS_GEMM_DEFAULT));
  }
  if (p.act == 1) {
    EMBER_DISPATCH_FLOAT(p.dtype, "cuBLAS gemm relu", [&] {
      unsigned grid = cuda::grid_for(total, 256, p.device.index);
      cuda::launch(relu_inplace_kernel<scalar_t>, grid, 256, 0, stream, static_cast<scalar_t*>(p.c), p.M, p.N, p.c_rs,
                   p.c_bs, total);
    });
  }
}

}  // namespace

void run_cublas(const Problem& p) { cublas_gemm(p, false); }

void run_cublas_tf32(const Problem& p) {
  EMBER_CHECK(p.dtype == DType::f32, "cuBLAS gemm: TF32 is for f32 operands, got ", p.dtype);
  cublas_gemm(p, true);
}

bool cublaslt_accepts(int64_t M, int64_t N, int64_t K, int act) {
  constexpr int64_t kMax = int64_t{65535} * 32;
  return act != 2 && M > 1 && N > 1 && K > 1 && M < kMax && N < kMax && K < kMax;
}

namespace {

// A cuBLASLt matmul described: the operation (transposes, epilogue, bias), the three matrix
// layouts (batched when bs.inner > 1), and the byte alignment of every pointer the calls will use.
struct LtCall {
  MatmulDesc op;
  LayoutDesc la, lb, lc;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  uint32_t al_a = 0, al_b = 0, al_c = 0;
};

void describe_op(const Problem& p, const CublasView& v, LtCall& c) {
  const cudaDataType_t scale_type = p.dtype == DType::f64 ? CUDA_R_64F : CUDA_R_32F;
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&c.op.d, v.compute, scale_type));
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.op.d, CUBLASLT_MATMUL_DESC_TRANSA, &v.ta, sizeof(v.ta)));
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.op.d, CUBLASLT_MATMUL_DESC_TRANSB, &v.tb, sizeof(v.tb)));
  if (p.bias != nullptr) c.epi = p.act == 1 ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (p.act == 1) c.epi = CUBLASLT_EPILOGUE_RELU;
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.op.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epi, sizeof(c.epi)));
  if (p.bias != nullptr)
    EMBER_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(c.op.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
}

void describe_layouts(const Problem& p, const CublasView& v, const BatchSplit& bs, LtCall& c) {
  // stored (pre-op) shapes, column-major: cuBLAS's A is our B, its B our A
  const uint64_t a_rows = v.ta == CUBLAS_OP_N ? p.N : p.K, a_cols = v.ta == CUBLAS_OP_N ? p.K : p.N;
  const uint64_t b_rows = v.tb == CUBLAS_OP_N ? p.K : p.M, b_cols = v.tb == CUBLAS_OP_N ? p.M : p.K;
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.la.d, v.type, a_rows, a_cols, v.lda));
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.lb.d, v.type, b_rows, b_cols, v.ldb));
  EMBER_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&c.lc.d, v.type, static_cast<uint64_t>(p.N), static_cast<uint64_t>(p.M), v.ldc));
  if (bs.inner > 1) {
    const int32_t count = static_cast<int32_t>(bs.inner);
    const int64_t sa = bs.b_stride, sb = bs.a_stride, sc = p.c_bs;
    for (auto [l, stride] : {std::pair{c.la.d, sa}, std::pair{c.lb.d, sb}, std::pair{c.lc.d, sc}}) {
      EMBER_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      EMBER_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }
  // alignment of every pointer the calls will use (outer batches included)
  const int64_t es = static_cast<int64_t>(v.es);
  std::vector<int64_t> a_strides, b_strides;
  for (int d = 0; d < p.nb; ++d) {
    a_strides.push_back(p.a_bs[d] * es);
    b_strides.push_back(p.b_bs[d] * es);
  }
  auto align_of = [](const void* ptr, const std::vector<int64_t>& strides, int64_t ld_bytes) {
    uint32_t a = alignment(ptr, {ld_bytes});
    for (int64_t s : strides) a = std::min(a, alignment(ptr, {s, ld_bytes}));
    return a;
  };
  c.al_a = align_of(p.b, b_strides, v.lda * es);
  c.al_b = align_of(p.a, a_strides, v.ldb * es);
  c.al_c = alignment(p.c, {v.ldc * es, p.c_bs * es});
}

// The cache key of cuBLASLt's choice: everything the heuristic query is given.
std::string lt_key(const Problem& p, const CublasView& v, const BatchSplit& bs, const LtCall& c) {
  std::ostringstream key;
  key << p.device.index << '|' << static_cast<int>(p.dtype) << '|' << v.ta << v.tb << '|' << p.M << ',' << p.N << ','
      << p.K << '|' << v.lda << ',' << v.ldb << ',' << v.ldc << '|' << bs.inner << ',' << bs.a_stride << ','
      << bs.b_stride << ',' << p.c_bs << '|' << static_cast<int>(c.epi) << '|' << c.al_a << ',' << c.al_b << ','
      << c.al_c;
  return key.str();
}

// A split-K configuration of the heuristic's made to run with one K-slice, if cuBLASLt accepts it
// within the workspace.
bool one_k_slice(cublasLtHandle_t h, const LtCall& c, uint64_t ws_bytes, cublasLtMatmulHeuristicResult_t& r) {
  cublasLtMatmulAlgo_t one_slice = r.algo;
  const uint32_t slices = 1, none = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasLtMatmulHeuristicResult_t checked{};
  if (cublasLtMatmulAlgoConfigSetAttribute(&one_slice, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &slices, sizeof(slices)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigSetAttribute(&one_slice, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof(none)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoCheck(h, c.op.d, c.la.d, c.lb.d, c.lc.d, c.lc.d, &one_slice, &checked) !=
          CUBLAS_STATUS_SUCCESS ||
      checked.workspaceSize > ws_bytes)
    return false;
  r.algo = one_slice;
  r.workspaceSize = checked.workspaceSize;
  return true;
}

void log_lt_choice(const Problem& p, const LtCall& c, const cublasLtMatmulHeuristicResult_t& r) {
  // which kernel configuration cuBLASLt chose, for telling where a vendor variant's numbers come from
  auto attr = [&](cublasLtMatmulAlgoConfigAttributes_t a) { return algo_config(r.algo, a, 0); };
  std::fprintf(stderr,
               "ember vendor: cuBLASLt %s M=%lld N=%lld K=%lld epilogue %d -> algo %u tile %u stages %u split-k %u "
               "reduction %u workspace %zu\n",
               std::string(dtype_name(p.dtype)).c_str(), (long long)p.M, (long long)p.N, (long long)p.K,
               static_cast<int>(c.epi), attr(CUBLASLT_ALGO_CONFIG_ID), attr(CUBLASLT_ALGO_CONFIG_TILE_ID),
               attr(CUBLASLT_ALGO_CONFIG_STAGES_ID), attr(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
               attr(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), r.workspaceSize);
}

// cuBLASLt's heuristic, asked once per problem: the first algorithm it offers that we accept.
cublasLtMatmulAlgo_t choose_lt_algo(cublasLtHandle_t h, const Problem& p, const LtCall& c, uint64_t ws_bytes) {
  PrefDesc pref;
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                          sizeof(ws_bytes)));
  for (auto [attr, al] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, c.al_a},
                          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, c.al_b},
                          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c.al_c},
                          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c.al_c}})
    EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, attr, &al, sizeof(al)));
  // split-K partials summed in f32 in a workspace, never in the output dtype nor in place in the
  // output: cuBLASLt's counterpart of the cuBLAS handle's DISALLOW_REDUCED_PRECISION_REDUCTION
  // (an H200 run gave bf16 results on the output dtype's grid with OUTPUT_TYPE and INPLACE allowed)
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                          sizeof(schemes)));
  // With a bias in f16/bf16, no split-K: an H200 run (cuBLASLt 13.1) chose 16 K-slices for bf16
  // [64,129] -> 33 and its output lost the small sums of an accumulator and a bias that nearly
  // cancel (0 where 0.0011 was due): the partials are reduced in f32 but the bias is added after
  // a rounding to bf16. Without split-K the epilogue adds the bias to the f32 accumulator. The
  // heuristic may list only split-K configurations (bf16 [64,3136] -> 128 did): the first one
  // that cuBLASLt accepts with one K-slice is taken.
  const bool no_splitk = p.bias != nullptr && (p.dtype == DType::f16 || p.dtype == DType::bf16);
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  EMBER_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(h, c.op.d, c.la.d, c.lb.d, c.lc.d, c.lc.d, pref.d, kCandidates, results, &found));
  auto unsplit = [](const cublasLtMatmulAlgo_t& a) { return algo_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1) <= 1; };
  int pick = -1;
  for (int i = 0; i < found && pick < 0; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS && (!no_splitk || unsplit(results[i].algo))) pick = i;
  for (int i = 0; i < found && pick < 0 && no_splitk; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS && one_k_slice(h, c, ws_bytes, results[i])) pick = i;
  EMBER_CHECK(pick >= 0, "cuBLASLt has no algorithm for ", p.dtype, " M=", p.M, " N=", p.N, " K=", p.K,
              " with epilogue ", static_cast<int>(c.epi), " (alignments ", c.al_a, "/", c.al_b, "/", c.al_c, " bytes",
              no_splitk ? "; split-K excluded with a bias in f16/bf16" : "", ", ", found, " candidates)");
  if (runtime::env("EMBER_VENDOR_LOG") == "1") log_lt_choice(p, c, results[pick]);
  return results[pick].algo;
}

}  // namespace

void run_cublaslt(const Problem& p) {
  const int64_t batch = p.batch();
  if (p.M == 0 || p.N == 0 || batch == 0) return;
  EMBER_CHECK(p.act == 0 || p.act == 1, "cuBLASLt gemm: only the none and relu epilogues are offered, got act ", p.act);
  if (p.K == 0) {
    run_naive(p);
    return;
  }
  const CublasView v = to_cublas(p);
  const BatchSplit bs = split_batch(p, false);
  check_int("batch count", bs.inner);
  const int64_t es = static_cast<int64_t>(v.es);
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  cublasLtHandle_t h = lt_handle(p.device.index);
  Tensor ws = workspace(p);
  const uint64_t ws_bytes = static_cast<uint64_t>(ws.numel());
  LtCall c;
  describe_op(p, v, c);
  describe_layouts(p, v, bs, c);

  const std::string key = lt_key(p, v, bs, c);
  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_lt_mu);
    auto it = g_lt_algos.find(key);
    if (it != g_lt_algos.end()) {
      algo = it->second;
      cached = true;
    }
  }
  if (!cached) {
    algo = choose_lt_algo(h, p, c, ws_bytes);
    std::lock_guard<std::mutex> lock(g_lt_mu);
    g_lt_algos[key] = algo;
  }

  const float alpha_f = 1.f, beta_f = 0.f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = p.dtype == DType::f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = p.dtype == DType::f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  for (int64_t o = 0; o < bs.outer; ++o) {
    int64_t ao, bo;
    outer_offsets(p, bs, o, ao, bo);
    const char* A = static_cast<const char*>(p.a) + ao * es;
    const char* B = static_cast<const char*>(p.b) + bo * es;
    char* C = static_cast<char*>(p.c) + o * bs.inner * p.c_bs * es;
    EMBER_CUBLAS_CHECK(cublasLtMatmul(h, c.op.d, alpha, B, c.la.d, A, c.lb.d, beta, C, c.lc.d, C, c.lc.d, &algo,
                                      ws.data_ptr(), ws_bytes, stream));
  }
}

}  // namespace ember::gemm
