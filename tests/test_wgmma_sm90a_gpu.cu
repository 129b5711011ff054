// wgmma.mma_async (kernels/common/wgmma.cuh) against the PTX ISA's descriptor layouts and
// accumulator fragments, element by element: a warpgroup lays A (64 x 16) and B (N x 16) out in
// shared memory K-major with each swizzle as Note [wgmma operand layouts] reads the ISA, runs one
// m64nNk16 bf16 MMA onto accumulators that already hold values, and every thread's registers are
// checked against D = C + A B^T by the documented fragment. Small integers make every sum exact.
// The same for m64nNk8 tf32 (A 64 x 8, B N x 8 of f32, K-major), and that tf32 ignores an f32's
// low 13 mantissa bits (Note [TF32 through wgmma] in kernels/gemm/gemm_wgmma_sm90a.cu). The
// expected values are computed here, so the same test checks the simulator and, in a build for
// a GPU, the hardware: the nvcc build compiles this file for sm_90a (tests/CMakeLists.txt, "_sm90a").
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cuda/kernel.cuh"
#include "core/half.h"
#include "core/tensor.h"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/functional.h"

using namespace ember;

namespace {

__global__ void wgmma_probe(int* out) { *out = ptx::wgmma_available() ? 1 : 0; }

struct alignas(1024) Operands {
  unsigned char a[8192], b[8192];
};

// The layout of an operand for a swizzle: K-major or MN-major, LBO and SBO.
struct Layout {
  ptx::WgmmaSwizzle swizzle;
  int span;  // 0 or the swizzle in bytes
  uint32_t lbo, sbo;
  bool mn_major = false;
};

// Byte offset of element (r, k) (e-byte elements; MN-major: 2-byte only) of an operand laid out as `l`.
EMBER_HD size_t operand_offset(const Layout& l, int r, int k, int e = 2) {
  const auto z = [](int v) { return static_cast<size_t>(v); };
  size_t o;
  if (!l.mn_major) {  // k contiguous: 8-row groups at SBO; without a swizzle, 16-byte k chunks at LBO
    const size_t kb = z(k) * z(e), group = z(r / 8) * l.sbo;
    if (l.span == 0) return group + (kb / 16) * l.lbo + z(r % 8) * 16 + kb % 16;
    o = group + z(r % 8) * z(l.span) + kb;
  } else {  // r contiguous: k rows of 16 (no swizzle) or `span` bytes; 8-k groups at LBO / SBO
    if (l.span == 0) return z(r / 8) * l.sbo + z(k / 8) * l.lbo + z(k % 8) * 16 + z(r % 8) * 2;
    const int per_row = l.span / 2;
    o = z(r / per_row) * l.lbo + z(k / 8) * l.sbo + z(k % 8) * z(l.span) + z(r % per_row) * 2;
  }
  return o ^ (((o >> 7) & z(l.span / 16 - 1)) << 4);
}

// One warpgroup: A and B (row-major [rows][K]: bf16 bits, K 16; or f32 bits for tf32, K 8) into
// shared memory as la and lb, then d = c + A B^T (TA / TB: la / lb is MN-major); thread t's N / 2
// accumulators go to out[t * N / 2 ...].
template <int N, int TA, int TB, bool TF32>
__global__ void wgmma_kernel(const void* A, const void* B, const float* c, float* out, Layout la, Layout lb) {
  using E = std::conditional_t<TF32, uint32_t, uint16_t>;
  constexpr int K = 32 / static_cast<int>(sizeof(E)), e = static_cast<int>(sizeof(E));
  EMBER_SHARED(Operands, s);
  const int t = static_cast<int>(threadIdx.x);
  for (int i = t; i < 64 * K; i += 128)
    reinterpret_cast<E*>(s.a)[operand_offset(la, i / K, i % K, e) / e] = static_cast<const E*>(A)[i];
  for (int i = t; i < N * K; i += 128)
    reinterpret_cast<E*>(s.b)[operand_offset(lb, i / K, i % K, e) / e] = static_cast<const E*>(B)[i];
  ptx::fence_proxy_async_shared();
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = c[t * (N / 2) + i];
  const uint64_t da = ptx::wgmma_desc(ptx::smem_address(s.a), la.lbo, la.sbo, la.swizzle);
  const uint64_t db = ptx::wgmma_desc(ptx::smem_address(s.b), lb.lbo, lb.sbo, lb.swizzle);
  ptx::wgmma_fence();
  if constexpr (TF32) ptx::wgmma_m64k8_tf32<N>(d, da, db, true);
  else ptx::wgmma_m64k16<N, TA, TB>(d, da, db, true, true);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  for (int i = 0; i < N / 2; ++i) out[t * (N / 2) + i] = d[i];
}

uint16_t bf16_bits(float v) {
  const BFloat16 h(v);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

// A's and B's values small integers, so every sum is exact; with low_bits (tf32), A's f32 patterns
// carry 0x1fff in their low 13 bits, which the MMA must ignore (truncation; rounding to nearest
// would add 2^-10 of a product).
template <int N, int TA = 0, int TB = 0, bool TF32 = false>
void check_wgmma(const Layout& la, const Layout& lb, bool low_bits = false) {
  constexpr int K = TF32 ? 8 : 16;
  INFO((TF32 ? "tf32" : "bf16") << ", N " << N << ", A " << (TA ? "MN" : "K") << "-major, swizzle " << la.span
                                << " B; B " << (TB ? "MN" : "K") << "-major, swizzle " << lb.span << " B"
                                << (low_bits ? ", low bits set" : ""));
  std::vector<float> af(64 * K), bf(N * K), c(128 * N / 2);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < K; ++k) af[m * K + k] = static_cast<float>((m * 3 + k * 5) % 7 - 3);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) bf[n * K + k] = static_cast<float>((n * 2 + k * 3) % 5 - 2);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i % 13) * 0.5f;
  const Device gpu(DeviceType::cuda, 0);
  // the operands' bits: bf16, or f32 (with the low bits set where asked) as i32
  const auto bits = [&](const std::vector<float>& v, bool low) {
    if (!TF32) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_bits(v[i]);
      return from_blob(h.data(), {static_cast<int64_t>(h.size())}, DType::bf16).to(gpu);
    }
    std::vector<uint32_t> w(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      std::memcpy(&w[i], &v[i], 4);
      if (low && v[i] != 0) w[i] |= 0x1fffu;
    }
    return from_blob(w.data(), {static_cast<int64_t>(w.size())}, DType::i32).to(gpu);
  };
  Tensor A = bits(af, low_bits), B = bits(bf, false);
  Tensor C = from_blob(c.data(), {static_cast<int64_t>(c.size())}, DType::f32).to(gpu);
  Tensor out = zeros({static_cast<int64_t>(c.size())}, TensorOptions(DType::f32).device(gpu));
  cuda::launch(wgmma_kernel<N, TA, TB, TF32>, 1, 128, 0, cuda::stream_for(out), A.data_ptr(), B.data_ptr(),
               C.data<float>(), out.data<float>(), la, lb);
  const std::vector<float> got = out.to(kCPU).to_vector<float>();
  int wrong = 0;
  for (int t = 0; t < 128; ++t) {
    const int w = t / 32, g = (t % 32) / 4, q = t % 4;
    for (int j = 0; j < N / 8; ++j)
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * w + g + (i >= 2 ? 8 : 0), col = 8 * j + 2 * q + (i & 1);
        const size_t r = static_cast<size_t>(t * (N / 2) + 4 * j + i);
        float want = c[r];
        for (int k = 0; k < K; ++k) want += af[row * K + k] * bf[col * K + k];
        if (got[r] != want && ++wrong <= 5)
          FAIL_CHECK("thread " << t << " d[" << 4 * j + i << "] = D[" << row << "][" << col << "]: got " << got[r]
                               << ", want " << want);
      }
  }
  CHECK(wrong == 0);
}

template <int N>
void check_wgmma_tf32(const Layout& la, const Layout& lb, bool low_bits = false) {
  check_wgmma<N, 0, 0, true>(la, lb, low_bits);
}

// K-major layouts. No swizzle: core matrices of 8 rows x 16 bytes, the next 8 k at LBO, the next 8
// rows at SBO. S-byte swizzles: rows of S bytes, 8-row atoms at SBO = 8 S (LBO unused for K-major).
const Layout kNone{ptx::WgmmaSwizzle::none, 0, 128, 256}, kS32{ptx::WgmmaSwizzle::b32, 32, 16, 256},
    kS64{ptx::WgmmaSwizzle::b64, 64, 16, 512}, kS128{ptx::WgmmaSwizzle::b128, 128, 16, 1024};

// Whether this file's kernels were built with wgmma (sm_90a, or the simulator).
bool wgmma_built() {
  Tensor probe = zeros({1}, TensorOptions(DType::i32).device(Device(DeviceType::cuda, 0)));
  cuda::launch(wgmma_probe, 1, 1, 0, cuda::stream_for(probe), static_cast<int*>(probe.data_ptr()));
  return probe.item<int>() != 0;
}

}  // namespace

TEST_CASE("wgmma: m64nNk16 bf16 from shared-memory descriptors onto the documented fragments", "[gpu][ptx][wgmma]") {
  if (!wgmma_built()) {
    WARN("skipped: this test was built without sm_90a, which wgmma needs");
    return;
  }
  const Layout none = kNone, s32 = kS32, s64 = kS64, s128 = kS128;
  for (const Layout& l : {none, s32, s64, s128}) {
    check_wgmma<8>(l, l);
    check_wgmma<64>(l, l);
  }
  check_wgmma<16>(s128, s128);
  check_wgmma<32>(none, none);
  check_wgmma<128>(none, none);  // the Hopper GEMM's tiles (kernels/gemm/gemm_wgmma_sm90a.cu)
  check_wgmma<256>(s32, s32);
  // MN-major (the transposed operands): without a swizzle, core matrices of 8 k rows of 16 bytes,
  // the next 8 k at LBO, the next 8 rows (m or n) at SBO; with an S-byte swizzle, k rows of S bytes
  // in 8-row atoms, the next 8 k at SBO = 8 S, the next S / 2 rows (m or n) at LBO = 16 S
  const Layout mn_none{ptx::WgmmaSwizzle::none, 0, 128, 256, true}, mn_s32{ptx::WgmmaSwizzle::b32, 32, 512, 256, true},
      mn_s64{ptx::WgmmaSwizzle::b64, 64, 1024, 512, true}, mn_s128{ptx::WgmmaSwizzle::b128, 128, 2048, 1024, true};
  for (const Layout& l : {mn_none, mn_s32, mn_s64, mn_s128}) {
    check_wgmma<64, 1, 1>(l, l);
    check_wgmma<16, 0, 1>(s128, l);
  }
  check_wgmma<128, 1, 0>(mn_s128, s32);   // the Hopper GEMM's A^T
  check_wgmma<128, 0, 1>(s128, mn_s128);  // and its row-major B (two atoms along n, LBO apart)
  check_wgmma<8, 1, 0>(mn_s64, none);
}

TEST_CASE("wgmma: m64nNk8 tf32 from K-major descriptors, and the low mantissa bits it ignores", "[gpu][ptx][wgmma]") {
  if (!wgmma_built()) {
    WARN("skipped: this test was built without sm_90a, which wgmma needs");
    return;
  }
  // the K-major layouts of the bf16 test: 16-byte rows of a core matrix hold 4 tf32 instead of 8
  const Layout none = kNone, s32 = kS32, s64 = kS64, s128 = kS128;
  for (const Layout& l : {none, s32, s64, s128}) check_wgmma_tf32<8>(l, l);
  check_wgmma_tf32<64>(s64, s128);
  check_wgmma_tf32<128>(s128, none);  // the Hopper GEMM's TF32 N (its B is 128-byte swizzled too)
  check_wgmma_tf32<256>(s128, s32);
  check_wgmma_tf32<8>(s128, s128, true);
}
