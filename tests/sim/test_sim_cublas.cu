// The simulator's emulation of cuBLAS and cuBLASLt (sim/libs/cublas.cpp, Note
// [simulated cublas]): each contract rule it checks, provoked by one broken call; the numerics it
// models (TF32, split-K reductions in the output type, the epilogue after a split-K rounding);
// its algorithm heuristic; graph capture; and strided-batched results against host loops in
// double. Simulator build only (-DEMBER_CUDA_SIM=ON): on a GPU the broken calls are undefined
// behaviour and the numerics are the library's.
#include <catch2/catch.hpp>

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "sim/libs/common.h"
#include "core/half.h"

using ember::sim::libs::last_error;

namespace {

// ---- device buffers and host data ----

enum class T { f16, bf16, f32, f64 };
size_t bytes_of(T t) { return t == T::f64 ? 8 : t == T::f32 ? 4 : 2; }
cudaDataType cuda_type(T t) {
  return t == T::f16 ? CUDA_R_16F : t == T::bf16 ? CUDA_R_16BF : t == T::f32 ? CUDA_R_32F : CUDA_R_64F;
}
// v rounded to t (what the buffer will hold).
double round_as(double v, T t) {
  switch (t) {
    case T::f16: return static_cast<float>(ember::Half(static_cast<float>(v)));
    case T::bf16: return static_cast<float>(ember::BFloat16(static_cast<float>(v)));
    case T::f32: return static_cast<float>(v);
    case T::f64: return v;
  }
  return v;
}

struct Buf {
  void* p = nullptr;
  size_t n = 0;
  T t = T::f32;
  Buf(size_t count, T type) : n(count), t(type) {
    REQUIRE(cudaMalloc(&p, std::max<size_t>(1, n) * bytes_of(t)) == cudaSuccess);
  }
  Buf(const std::vector<double>& v, T type) : Buf(v.size(), type) { upload(v); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void upload(const std::vector<double>& v) {
    std::vector<unsigned char> raw(v.size() * bytes_of(t));
    for (size_t i = 0; i < v.size(); ++i) {
      unsigned char* q = raw.data() + i * bytes_of(t);
      if (t == T::f16) {
        ember::Half h(static_cast<float>(v[i]));
        std::memcpy(q, &h, 2);
      } else if (t == T::bf16) {
        ember::BFloat16 h(static_cast<float>(v[i]));
        std::memcpy(q, &h, 2);
      } else if (t == T::f32) {
        float f = static_cast<float>(v[i]);
        std::memcpy(q, &f, 4);
      } else {
        std::memcpy(q, &v[i], 8);
      }
    }
    REQUIRE(cudaMemcpy(p, raw.data(), raw.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<double> download() const {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<unsigned char> raw(n * bytes_of(t));
    REQUIRE(cudaMemcpy(raw.data(), p, raw.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) {
      const unsigned char* q = raw.data() + i * bytes_of(t);
      if (t == T::f16) {
        ember::Half h;
        std::memcpy(&h, q, 2);
        v[i] = static_cast<float>(h);
      } else if (t == T::bf16) {
        ember::BFloat16 h;
        std::memcpy(&h, q, 2);
        v[i] = static_cast<float>(h);
      } else if (t == T::f32) {
        float f;
        std::memcpy(&f, q, 4);
        v[i] = f;
      } else {
        std::memcpy(&v[i], q, 8);
      }
    }
    return v;
  }
  double at(size_t i) const { return download()[i]; }
};

// Deterministic values in [-1, 1], exactly representable in t.
std::vector<double> values(size_t n, T t, uint32_t seed) {
  std::vector<double> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = round_as(static_cast<double>(s >> 8) / static_cast<double>(1u << 24) * 2.0 - 1.0, t);
  }
  return v;
}

// Column-major op(X)(r, c) of batch z.
double op_at(const std::vector<double>& x, bool trans, int64_t ld, int64_t stride, int64_t z, int64_t r, int64_t c) {
  return trans ? x[static_cast<size_t>(z * stride + c + r * ld)] : x[static_cast<size_t>(z * stride + r + c * ld)];
}

struct Blas {
  cublasHandle_t h = nullptr;
  Blas() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~Blas() { cublasDestroy(h); }
};
struct Lt {
  cublasLtHandle_t h = nullptr;
  Lt() { REQUIRE(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~Lt() { cublasLtDestroy(h); }
};

// One cuBLASLt problem: D[m, n] = op(A) op(B) (+ C), column-major, with its descriptors.
struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtGemm(int64_t m, int64_t n, int64_t k, cudaDataType type, cublasComputeType_t compute,
         cudaDataType scale = CUDA_R_32F, cudaDataType out = static_cast<cudaDataType>(-1)) {
    if (static_cast<int>(out) == -1) out = type;
    REQUIRE(cublasLtMatmulDescCreate(&op, compute, scale) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&a, type, m, k, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&b, type, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&c, out, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&d, out, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  }
  ~LtGemm() {
    cublasLtMatmulDescDestroy(op);
    for (auto l : {a, b, c, d}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
  }
  void set_max_workspace(uint64_t bytes) {
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                 sizeof bytes) == CUBLAS_STATUS_SUCCESS);
  }
  void set_mask(uint32_t mask) {
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                                 sizeof mask) == CUBLAS_STATUS_SUCCESS);
  }
  void set_epilogue(cublasLtEpilogue_t e, const void* bias) {
    REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e) == CUBLAS_STATUS_SUCCESS);
    if (bias != nullptr)
      REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) ==
              CUBLAS_STATUS_SUCCESS);
  }
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(cublasLtHandle_t h, cublasStatus_t* status = nullptr) {
    std::vector<cublasLtMatmulHeuristicResult_t> r(16);
    int found = -1;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, d, pref, 16, r.data(), &found);
    if (status != nullptr) *status = st;
    else REQUIRE(st == CUBLAS_STATUS_SUCCESS);
    r.resize(static_cast<size_t>(std::max(found, 0)));
    return r;
  }
};

uint32_t config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  REQUIRE(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written) == CUBLAS_STATUS_SUCCESS);
  CHECK(written == sizeof v);
  return v;
}
void set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, uint32_t v) {
  REQUIRE(cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &v, sizeof v) == CUBLAS_STATUS_SUCCESS);
}

// A over K = 256 whose four 64-wide slices sum to 64.203125, -64, 0, 0 (B all ones): the exact sum
// 0.203125 is a bf16, a 64.203125 rounded to bf16 is 64 and the sum then cancels to 0.
std::vector<double> cancelling_row(bool only_first_slice) {
  std::vector<double> a(256, 0.0);
  for (int p = 0; p < 64; ++p) a[static_cast<size_t>(p)] = 1.0;
  a[0] = 1.203125;
  if (!only_first_slice)
    for (int p = 64; p < 128; ++p) a[static_cast<size_t>(p)] = -1.0;
  return a;
}

}  // namespace

TEST_CASE("simulated cuBLAS: argument checks return the documented status", "[gpu][vendor-sim]") {
  Blas b;
  const float one = 1.f, zero = 0.f;
  Buf A(64 * 64, T::f32), B(64 * 64, T::f32), C(64 * 64 * 2, T::f32);
  auto gemm = [&](cublasHandle_t h, cublasOperation_t ta, int m, int n, int k, int lda, int ldb, int ldc,
                  cudaDataType at, cudaDataType ct, cublasComputeType_t compute) {
    return cublasGemmEx(h, ta, CUBLAS_OP_N, m, n, k, &one, A.p, at, lda, B.p, at, ldb, &zero, C.p, ct, ldc, compute,
                        CUBLAS_GEMM_DEFAULT);
  };
  const auto f32 = CUDA_R_32F;
  REQUIRE(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, f32, f32, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS);
  CHECK(last_error().empty());

  SECTION("handles") {
    CHECK(cublasCreate(nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    int garbage[64] = {};
    CHECK(gemm(reinterpret_cast<cublasHandle_t>(garbage), CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, f32, f32,
               CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_INITIALIZED);
    cublasHandle_t dead = nullptr;
    REQUIRE(cublasCreate(&dead) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasDestroy(dead) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasSetStream(dead, nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(cublasDestroy(dead) == CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(!last_error().empty());
    cublasMath_t mode{};
    CHECK(cublasSetMathMode(b.h, static_cast<cublasMath_t>(5)) == CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(cublasGetMathMode(b.h, &mode) == CUBLAS_STATUS_SUCCESS);
    CHECK(mode == CUBLAS_DEFAULT_MATH);
    cudaStream_t s = reinterpret_cast<cudaStream_t>(1);
    REQUIRE(cublasGetStream(b.h, &s) == CUBLAS_STATUS_SUCCESS);
    CHECK(s == nullptr);
    int devices = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    if (devices >= 2) {  // a handle is tied to the device it was created on
      REQUIRE(cudaSetDevice(1) == cudaSuccess);
      CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, f32, f32, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE);
      REQUIRE(cudaSetDevice(0) == cudaSuccess);
    }
  }
  SECTION("sizes, transposes and leading dimensions") {
    CHECK(gemm(b.h, CUBLAS_OP_N, -1, 8, 8, 8, 8, 8, f32, f32, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("negative size"));
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, -2, 8, 8, 8, f32, f32, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(gemm(b.h, CUBLAS_OP_CONJG, 8, 8, 8, 8, 8, 8, f32, f32, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(gemm(b.h, CUBLAS_OP_N, 16, 8, 8, 8, 8, 16, f32, f32, CUBLAS_COMPUTE_32F) ==
          CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    CHECK_THAT(last_error(), Catch::Contains("lda"));
    CHECK(gemm(b.h, CUBLAS_OP_T, 8, 8, 16, 8, 16, 8, f32, f32, CUBLAS_COMPUTE_32F) ==
          CUBLAS_STATUS_INVALID_VALUE);  // lda < k
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 16, 8, 8, 8, f32, f32, CUBLAS_COMPUTE_32F) ==
          CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 4, f32, f32, CUBLAS_COMPUTE_32F) ==
          CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
    CHECK(cublasGemmStridedBatchedEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, A.p, f32, 8, 64, B.p, f32, 8, 64,
                                     &zero, C.p, f32, 8, 64, -1, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
    // strideC 32 < the 64 elements of an 8 x 8 C: the batches would overlap
    CHECK(cublasGemmStridedBatchedEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, A.p, f32, 8, 64, B.p, f32, 8, 64,
                                     &zero, C.p, f32, 8, 32, 2, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("overlap"));
    // interleaved batches (column stride 16 holds both 8-row batches) do not overlap
    CHECK(cublasGemmStridedBatchedEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, A.p, f32, 8, 64, B.p, f32, 8, 64,
                                     &zero, C.p, f32, 16, 8, 2, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  }
  SECTION("types and compute types") {
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, f32, f32, CUBLAS_COMPUTE_64F) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F_FAST_TF32) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_16F) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK_THAT(last_error(), Catch::Contains("cublasGemmEx table"));
    CHECK(gemm(b.h, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, CUDA_R_16BF, f32, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS);
    CHECK_THAT(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)), Catch::Contains("not supported"));
    CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) == "CUBLAS_STATUS_INVALID_VALUE");
  }
  SECTION("pointers and workspace") {
    std::vector<float> host(64 * 64);
    CHECK(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, host.data(), f32, 8, B.p, f32, 8, &zero, C.p, f32,
                       8, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("A is not device memory"));
    CHECK(gemm(b.h, CUBLAS_OP_N, 64, 64, 8, 64, 8, 64, f32, f32, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 8, &one, A.p, f32, 64, B.p, f32, 8, &zero, B.p, f32, 64,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    Buf small(16, T::f32);
    CHECK(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, A.p, f32, 8, B.p, f32, 8, &zero, small.p, f32, 8,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, nullptr, A.p, f32, 8, B.p, f32, 8, &zero, C.p, f32, 8,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
    Buf ws(4096, T::f32);
    CHECK(cublasSetWorkspace(b.h, static_cast<char*>(ws.p) + 128, 1024) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("256 bytes"));
    CHECK(cublasSetWorkspace(b.h, host.data() + 64 - (reinterpret_cast<uintptr_t>(host.data()) % 256) / 4, 128) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasSetWorkspace(b.h, ws.p, 4096 * 4) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasSetWorkspace(b.h, ws.p, 1 << 20) == CUBLAS_STATUS_INVALID_VALUE);  // past the allocation
  }
}

TEST_CASE("simulated cuBLASLt: argument checks and the algorithm heuristic", "[gpu][vendor-sim]") {
  Lt lt;
  const float one = 1.f, zero = 0.f;
  LtGemm g(32, 32, 64, CUDA_R_32F, CUBLAS_COMPUTE_32F);
  Buf A(32 * 64, T::f32), B(64 * 32, T::f32), D(32 * 32, T::f32), bias(32, T::f32), ws(1 << 16, T::f32);
  auto matmul = [&](const cublasLtMatmulAlgo_t* algo, size_t ws_bytes) {
    return cublasLtMatmul(lt.h, g.op, &one, A.p, g.a, B.p, g.b, &zero, D.p, g.c, D.p, g.d, algo, ws.p, ws_bytes,
                          nullptr);
  };
  REQUIRE(matmul(nullptr, 0) == CUBLAS_STATUS_SUCCESS);

  SECTION("attributes") {
    const int32_t t = CUBLAS_OP_T;
    CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, 8) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("takes 4 bytes"));
    CHECK(cublasLtMatmulDescSetAttribute(g.op, static_cast<cublasLtMatmulDescAttributes_t>(9), &t, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    const int32_t bad_op = 9;
    CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &bad_op, 4) == CUBLAS_STATUS_INVALID_VALUE);
    const uint32_t bad_epi = 3;
    CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &bad_epi, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4) == CUBLAS_STATUS_INVALID_VALUE);
    int32_t got = -1;
    size_t written = 0;
    CHECK(cublasLtMatmulDescGetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &got, 0, nullptr) ==
          CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(cublasLtMatmulDescGetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, &written) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(written == 4);
    REQUIRE(cublasLtMatmulDescGetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &got, 4, &written) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(got == CUBLAS_OP_N);
    const int32_t zero_batch = 0;
    CHECK(cublasLtMatrixLayoutSetAttribute(g.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &zero_batch, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    const uint32_t bad_mask = 8;
    CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &bad_mask, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bad_mask, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);  // a uint64_t
    cublasLtMatmulDesc_t dead = nullptr;
    REQUIRE(cublasLtMatmulDescCreate(&dead, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescDestroy(dead) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulDescSetAttribute(dead, CUBLASLT_MATMUL_DESC_TRANSA, &t, 4) == CUBLAS_STATUS_INVALID_VALUE);
    cublasLtHandle_t dead_lt = nullptr;
    REQUIRE(cublasLtCreate(&dead_lt) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtDestroy(dead_lt) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmul(dead_lt, g.op, &one, A.p, g.a, B.p, g.b, &zero, D.p, g.c, D.p, g.d, nullptr, nullptr, 0,
                         nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
  }
  SECTION("problem checks") {
    const int64_t short_ld = 16;  // < 32 rows
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.a, CUBLASLT_MATRIX_LAYOUT_LD, &short_ld, 8) == CUBLAS_STATUS_SUCCESS);
    CHECK(matmul(nullptr, 0) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("ld 16 < rows 32"));
    const int64_t ld = 32;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.a, CUBLASLT_MATRIX_LAYOUT_LD, &ld, 8) == CUBLAS_STATUS_SUCCESS);
    const int32_t t = CUBLAS_OP_T;  // op(A) becomes 64 x 32: k no longer matches B's 64 rows
    REQUIRE(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, 4) == CUBLAS_STATUS_SUCCESS);
    CHECK(matmul(nullptr, 0) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("do not make a matmul"));
    const int32_t n = CUBLAS_OP_N;
    REQUIRE(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &n, 4) == CUBLAS_STATUS_SUCCESS);
    const int32_t two = 2;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, 4) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(matmul(nullptr, 0) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("batch counts differ"));
    const int32_t single = 1;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &single, 4) ==
            CUBLAS_STATUS_SUCCESS);
    // in place with C and D layouts that differ
    const int64_t wide = 48;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.c, CUBLASLT_MATRIX_LAYOUT_LD, &wide, 8) == CUBLAS_STATUS_SUCCESS);
    CHECK(matmul(nullptr, 0) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("in place"));
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.c, CUBLASLT_MATRIX_LAYOUT_LD, &ld, 8) == CUBLAS_STATUS_SUCCESS);
    g.set_epilogue(CUBLASLT_EPILOGUE_RELU_BIAS, nullptr);
    CHECK(matmul(nullptr, 0) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("BIAS_POINTER"));
    g.set_epilogue(CUBLASLT_EPILOGUE_RELU_BIAS, bias.p);
    CHECK(matmul(nullptr, 0) == CUBLAS_STATUS_SUCCESS);
    LtGemm wrong(32, 32, 64, CUDA_R_32F, CUBLAS_COMPUTE_64F, CUDA_R_64F);
    CHECK(cublasLtMatmul(lt.h, wrong.op, &one, A.p, wrong.a, B.p, wrong.b, &zero, D.p, wrong.c, D.p, wrong.d, nullptr,
                         nullptr, 0, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SECTION("heuristic, algo configuration and check") {
    int found = -1;
    cublasLtMatmulHeuristicResult_t r[4];
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt.h, g.op, g.a, g.b, g.c, g.d, g.pref, 0, r, &found) ==
          CUBLAS_STATUS_INVALID_VALUE);
    // default preference: no workspace, so no split-K; 16-byte algos allowed (256-byte alignment)
    auto list = g.heuristic(lt.h);
    REQUIRE(!list.empty());
    for (auto& x : list) {
      CHECK(x.workspaceSize == 0);
      CHECK(config(x.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) == 1);
    }
    g.set_max_workspace(1 << 20);
    list = g.heuristic(lt.h);
    bool split = false;
    for (auto& x : list)
      if (config(x.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) {
        split = true;
        CHECK(x.workspaceSize > 0);
        CHECK(config(x.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) ==
              CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);  // the worst
      }
    CHECK(split);
    // a split-K algo run with too little workspace, or with SPLITK_NUM > 1 and no reduction scheme
    cublasLtMatmulAlgo_t splitk{};
    size_t need = 0;
    for (auto& x : list)
      if (config(x.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) {
        splitk = x.algo;
        need = x.workspaceSize;
        break;
      }
    CHECK(matmul(&splitk, need - 1) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("workspace"));
    CHECK(matmul(&splitk, need) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulAlgo_t bad = splitk;
    set_config(bad, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_REDUCTION_SCHEME_NONE);
    cublasLtMatmulHeuristicResult_t checked{};
    CHECK(cublasLtMatmulAlgoCheck(lt.h, g.op, g.a, g.b, g.c, g.d, &bad, &checked) == CUBLAS_STATUS_INVALID_VALUE);
    const uint32_t bad_scheme = 3;
    CHECK(cublasLtMatmulAlgoConfigSetAttribute(&bad, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &bad_scheme, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasLtMatmulAlgoConfigSetAttribute(&bad, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &bad_scheme, 2) ==
          CUBLAS_STATUS_INVALID_VALUE);
    // ember's fallback: one K-slice, no reduction, checked
    set_config(bad, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
    REQUIRE(cublasLtMatmulAlgoCheck(lt.h, g.op, g.a, g.b, g.c, g.d, &bad, &checked) == CUBLAS_STATUS_SUCCESS);
    CHECK(checked.workspaceSize == 0);
    CHECK(matmul(&bad, 0) == CUBLAS_STATUS_SUCCESS);
    // alignment: 4-byte buffers exclude the 16-byte algos; running one on a 4-byte pointer is refused
    const uint32_t four = 4;
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four, 4) ==
            CUBLAS_STATUS_SUCCESS);
    for (auto& x : g.heuristic(lt.h))
      CHECK(config(x.algo, CUBLASLT_ALGO_CONFIG_ID) != config(list[0].algo, CUBLASLT_ALGO_CONFIG_ID));
    Buf A2(32 * 64 + 1, T::f32);
    cublasLtMatmulAlgo_t aligned = list[0].algo;  // a 16-byte algo, without split-K
    set_config(aligned, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
    set_config(aligned, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_REDUCTION_SCHEME_NONE);
    CHECK(cublasLtMatmul(lt.h, g.op, &one, static_cast<float*>(A2.p) + 1, g.a, B.p, g.b, &zero, D.p, g.c, D.p, g.d,
                         &aligned, ws.p, 0, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK_THAT(last_error(), Catch::Contains("aligned"));
  }
  SECTION("shapes where split-K is the natural choice list only split-K") {
    LtGemm s(33, 64, 129, CUDA_R_16BF, CUBLAS_COMPUTE_32F);  // bf16 [64,129] -> 33 as gemm_vendor.cu describes
    s.set_max_workspace(32 << 20);
    s.set_mask(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    auto list = s.heuristic(lt.h);
    REQUIRE(!list.empty());
    for (auto& x : list) {
      CHECK(config(x.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1);
      CHECK(config(x.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    }
    s.set_mask(0);  // no reduction scheme allowed: nothing fits
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    CHECK(s.heuristic(lt.h, &st).empty());
    CHECK(st == CUBLAS_STATUS_NOT_SUPPORTED);
    s.set_mask(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    s.set_max_workspace(64);  // too little for any split: nothing fits
    CHECK(s.heuristic(lt.h, &st).empty());
    CHECK(st == CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

TEST_CASE("simulated cuBLAS: numerics are the worst the configuration permits", "[gpu][vendor-sim]") {
  const float one = 1.f, zero = 0.f;
  SECTION("TF32 with COMPUTE_32F_FAST_TF32 or the TF32 math mode, not with COMPUTE_32F") {
    Blas b;
    const double x = 1.0 + 1.0 / 4096;  // an f32, but 1 in TF32
    Buf A(std::vector<double>{x}, T::f32), B(std::vector<double>{1.0}, T::f32), C(1, T::f32);
    auto run = [&](cublasComputeType_t compute) {
      REQUIRE(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, A.p, CUDA_R_32F, 1, B.p, CUDA_R_32F, 1, &zero,
                           C.p, CUDA_R_32F, 1, compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      return C.at(0);
    };
    CHECK(run(CUBLAS_COMPUTE_32F) == x);
    CHECK(run(CUBLAS_COMPUTE_32F_FAST_TF32) == 1.0);
    REQUIRE(cublasSetMathMode(b.h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
    CHECK(run(CUBLAS_COMPUTE_32F) == 1.0);
    CHECK(run(CUBLAS_COMPUTE_32F_PEDANTIC) == x);
    Lt lt;
    for (auto [compute, want] : {std::pair{CUBLAS_COMPUTE_32F, x}, std::pair{CUBLAS_COMPUTE_32F_FAST_TF32, 1.0}}) {
      LtGemm g(1, 1, 1, CUDA_R_32F, compute);
      REQUIRE(cublasLtMatmul(lt.h, g.op, &one, A.p, g.a, B.p, g.b, &zero, C.p, g.c, C.p, g.d, nullptr, nullptr, 0,
                             nullptr) == CUBLAS_STATUS_SUCCESS);
      CHECK(C.at(0) == want);
    }
  }
  SECTION("cuBLAS split-K in bf16 without CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION") {
    Blas b;
    Buf A(cancelling_row(false), T::bf16), B(std::vector<double>(256, 1.0), T::bf16), C(1, T::bf16);
    auto run = [&] {
      REQUIRE(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 256, &one, A.p, CUDA_R_16BF, 1, B.p, CUDA_R_16BF, 256,
                           &zero, C.p, CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      return C.at(0);
    };
    CHECK(run() == 0.0);  // 64.203125 rounded to 64 before -64 was added
    REQUIRE(cublasSetMathMode(b.h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(run() == 0.203125);
  }
  SECTION("cuBLASLt: OUTPUT_TYPE vs COMPUTE_TYPE reduction, and the epilogue after a split-K rounding") {
    Lt lt;
    Buf B(std::vector<double>(256, 1.0), T::bf16), D(1, T::bf16), ws(1 << 12, T::f32);
    LtGemm g(1, 1, 256, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
    g.set_max_workspace(1 << 14);
    auto list = g.heuristic(lt.h);
    REQUIRE(!list.empty());
    cublasLtMatmulAlgo_t algo = list[0].algo;
    CHECK(config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1);  // m n = 1, K = 256: split-K only
    auto run = [&](const Buf& A, uint32_t splits, uint32_t scheme) {
      set_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits);
      set_config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme);
      REQUIRE(cublasLtMatmul(lt.h, g.op, &one, A.p, g.a, B.p, g.b, &zero, D.p, g.c, D.p, g.d, &algo, ws.p, 1 << 14,
                             nullptr) == CUBLAS_STATUS_SUCCESS);
      return D.at(0);
    };
    Buf A(cancelling_row(false), T::bf16);
    CHECK(run(A, 4, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE) == 0.0);
    CHECK(run(A, 4, CUBLASLT_REDUCTION_SCHEME_INPLACE) == 0.0);
    CHECK(run(A, 4, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) == 0.203125);
    CHECK(run(A, 1, CUBLASLT_REDUCTION_SCHEME_NONE) == 0.203125);
    // accumulator 64.203125 and bias -64: with split-K the bias meets the sum rounded to bf16
    Buf A1(cancelling_row(true), T::bf16), bias(std::vector<double>{-64.0}, T::bf16);
    g.set_epilogue(CUBLASLT_EPILOGUE_BIAS, bias.p);
    CHECK(run(A1, 4, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) == 0.0);
    CHECK(run(A1, 1, CUBLASLT_REDUCTION_SCHEME_NONE) == 0.203125);
  }
}

TEST_CASE("simulated cuBLAS: graph capture", "[gpu][vendor-sim]") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  const float one = 1.f, zero = 0.f;
  const int m = 8, n = 8, k = 128;  // k >= 64: the GEMM wants split-K workspace
  std::vector<double> a = values(m * k, T::f32, 1), bv = values(k * n, T::f32, 2);
  Buf A(a, T::f32), B(bv, T::f32), C(m * n, T::f32), ws(1 << 16, T::f32);
  auto gemm = [&](cublasHandle_t h) {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A.p, CUDA_R_32F, m, B.p, CUDA_R_32F, k, &zero, C.p,
                        CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  auto reference = [&](const std::vector<double>& av, int64_t i, int64_t j) {
    double acc = 0;
    for (int64_t p = 0; p < k; ++p) acc += av[static_cast<size_t>(i + p * m)] * bv[static_cast<size_t>(p + j * k)];
    return acc;
  };
  SECTION("cublasCreate allocates device memory: it fails during a capture") {
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    cublasHandle_t h = nullptr;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_ALLOC_FAILED);
    CHECK_THAT(last_error(), Catch::Contains("cudaMalloc"));
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) != cudaSuccess);  // the cudaMalloc invalidated the capture
    static_cast<void>(cudaGetLastError());
  }
  SECTION("a captured GEMM with cublasSetWorkspace replays with the inputs of the replay") {
    Blas b;
    REQUIRE(cublasSetStream(b.h, s) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasSetWorkspace(b.h, ws.p, (1 << 16) * 4) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(gemm(b.h) == CUBLAS_STATUS_SUCCESS);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    const std::vector<double> a2 = values(m * k, T::f32, 7);
    A.upload(a2);  // the replay reads what A holds then
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    const std::vector<double> got = C.download();
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i)
        CHECK(got[static_cast<size_t>(i + j * m)] == Approx(reference(a2, i, j)).margin(1e-5));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  SECTION("without cublasSetWorkspace the default pool's cudaMalloc fails in the capture") {
    Blas b;
    REQUIRE(cublasSetStream(b.h, s) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(gemm(b.h) == CUBLAS_STATUS_ALLOC_FAILED);
    CHECK_THAT(last_error(), Catch::Contains("cublasSetWorkspace"));
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) != cudaSuccess);
    static_cast<void>(cudaGetLastError());
    // outside a capture the same call allocates the pool and computes
    REQUIRE(gemm(b.h) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(C.at(3) == Approx(reference(a, 3, 0)).margin(1e-5));
  }
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("simulated cuBLAS: strided-batched GEMMs and cuBLASLt epilogues match host loops", "[gpu][vendor-sim]") {
  Blas b;
  Lt lt;
  const int m = 13, n = 9, k = 70, batch = 3;  // k >= 64: cuBLAS splits K
  for (T t : {T::f32, T::f64, T::f16, T::bf16}) {
    const double tol = t == T::f64 ? 1e-12 : t == T::f32 ? 1e-5 : t == T::bf16 ? 2e-2 : 4e-3;
    const cudaDataType ct = cuda_type(t);
    const cublasComputeType_t compute = t == T::f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    const double alpha = 0.5, beta = 0.25;
    const float af = 0.5f, bf = 0.25f;
    const void* pa = t == T::f64 ? static_cast<const void*>(&alpha) : static_cast<const void*>(&af);
    const void* pb = t == T::f64 ? static_cast<const void*>(&beta) : static_cast<const void*>(&bf);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(static_cast<int>(t), ta, tb);
        const int lda = (ta ? k : m) + 2, ldb = (tb ? n : k) + 1, ldc = m + 3;
        const int64_t sa = static_cast<int64_t>(lda) * (ta ? m : k) + 5, sb = static_cast<int64_t>(ldb) * (tb ? k : n);
        const int64_t sc = static_cast<int64_t>(ldc) * n + 7;
        const std::vector<double> av = values(static_cast<size_t>(sa * batch), t, 11),
                                  bv = values(static_cast<size_t>(sb * batch), t, 12);
        const std::vector<double> cv = values(static_cast<size_t>(sc * batch), t, 13);
        Buf A(av, t), B(bv, t), C(cv, t);
        if (t != T::f64)
          REQUIRE(cublasSetMathMode(b.h, static_cast<cublasMath_t>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) ==
                  CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasGemmStridedBatchedEx(b.h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                           pa, A.p, ct, lda, sa, B.p, ct, ldb, sb, pb, C.p, ct, ldc, sc, batch, compute,
                                           CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
        const std::vector<double> got = C.download();
        for (int64_t z = 0; z < batch; ++z)
          for (int64_t j = 0; j < n; ++j)
            for (int64_t i = 0; i < m; ++i) {
              double acc = 0, mag = 0;
              for (int64_t p = 0; p < k; ++p) {
                const double prod = op_at(av, ta, lda, sa, z, i, p) * op_at(bv, tb, ldb, sb, z, p, j);
                acc += prod;
                mag += std::fabs(prod);
              }
              const size_t ci = static_cast<size_t>(z * sc + i + j * ldc);
              const double want = alpha * acc + beta * cv[ci];
              CHECK(got[ci] == Approx(want).margin(tol * (alpha * mag + 1)));
            }
        // the gaps between the C matrices are untouched
        CHECK(got[static_cast<size_t>(ldc * n)] == cv[static_cast<size_t>(ldc * n)]);
      }
    // cuBLASLt with a bias and an activation, batched, D apart from C
    for (cublasLtEpilogue_t epi : {CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS}) {
      if (t == T::f64) continue;  // cuBLASLt's epilogues: f32 / f16 / bf16 here
      CAPTURE(static_cast<int>(t), static_cast<int>(epi));
      LtGemm g(m, n, 24, ct, CUBLAS_COMPUTE_32F);
      const int32_t count = batch;
      const int64_t strides[4] = {m * 24, 24 * n, m * n, m * n};
      cublasLtMatrixLayout_t ls[4] = {g.a, g.b, g.c, g.d};
      for (int i = 0; i < 4; ++i) {
        REQUIRE(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, 4) ==
                CUBLAS_STATUS_SUCCESS);
        REQUIRE(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], 8) ==
                CUBLAS_STATUS_SUCCESS);
      }
      const std::vector<double> av = values(m * 24 * batch, t, 21), bv = values(24 * n * batch, t, 22);
      const std::vector<double> cv = values(m * n * batch, t, 23), biasv = values(m * batch, t, 24);
      Buf A(av, t), B(bv, t), C(cv, t), D(m * n * batch, t), bias(biasv, t);
      g.set_epilogue(epi, bias.p);
      const int64_t bias_stride = m;
      REQUIRE(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, 8) ==
              CUBLAS_STATUS_SUCCESS);
      const float alpha_f = 1.f, beta_f = 0.5f;
      REQUIRE(cublasLtMatmul(lt.h, g.op, &alpha_f, A.p, g.a, B.p, g.b, &beta_f, C.p, g.c, D.p, g.d, nullptr, nullptr, 0,
                             nullptr) == CUBLAS_STATUS_SUCCESS);
      const std::vector<double> got = D.download();
      for (int64_t z = 0; z < batch; ++z)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < m; ++i) {
            double v = 0, mag = 0;
            for (int64_t p = 0; p < 24; ++p) {
              const double prod =
                  av[static_cast<size_t>(z * m * 24 + i + p * m)] * bv[static_cast<size_t>(z * 24 * n + p + j * 24)];
              v += prod;
              mag += std::fabs(prod);
            }
            v += 0.5 * cv[static_cast<size_t>(z * m * n + i + j * m)] + biasv[static_cast<size_t>(z * m + i)];
            v = epi == CUBLASLT_EPILOGUE_RELU_BIAS
                    ? std::max(v, 0.0)
                    : 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            CHECK(got[static_cast<size_t>(z * m * n + i + j * m)] == Approx(v).margin(tol * (mag + 2)));
          }
    }
  }
}
