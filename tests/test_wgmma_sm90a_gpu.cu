// wgmma.mma_async (kernels/common/wgmma.cuh) against the PTX ISA's descriptor layouts and
// accumulator fragments, element by element: a warpgroup lays A (64 x 16) and B (N x 16) out in
// shared memory K-major with each swizzle as Note [wgmma operand layouts] reads the ISA, runs one
// m64nNk16 bf16 MMA onto accumulators that already hold values, and every thread's registers are
// checked against D = C + A B^T by the documented fragment. Small integers make every sum exact. The
// expected values are computed here, so the same test checks the simulator and, in a build for
// a GPU, the hardware: the nvcc build compiles this file for sm_90a (tests/CMakeLists.txt, "_sm90a").
#include <catch2/catch.hpp>

#include <cstdint>
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

// Byte offset of element (r, k) (2-byte elements) of an operand laid out as `l`.
EMBER_HD size_t operand_offset(const Layout& l, int r, int k) {
  const auto z = [](int v) { return static_cast<size_t>(v); };
  size_t o;
  if (!l.mn_major) {  // k contiguous: 8-row groups at SBO; without a swizzle, 16-byte k chunks at LBO
    const size_t kb = z(k) * 2, group = z(r / 8) * l.sbo;
    if (l.span == 0) return group + (kb / 16) * l.lbo + z(r % 8) * 16 + kb % 16;
    o = group + z(r % 8) * z(l.span) + kb;
  } else {  // r contiguous: k rows of 16 (no swizzle) or `span` bytes; 8-k groups at LBO / SBO
    if (l.span == 0) return z(r / 8) * l.sbo + z(k / 8) * l.lbo + z(k % 8) * 16 + z(r % 8) * 2;
    const int per_row = l.span / 2;
    o = z(r / per_row) * l.lbo + z(k / 8) * l.sbo + z(k % 8) * z(l.span) + z(r % per_row) * 2;
  }
  return o ^ (((o >> 7) & z(l.span / 16 - 1)) << 4);
}

// One warpgroup: A and B (bf16 bits, row-major [rows][16]) into shared memory as la and lb, then
// d = c + A B^T (TA / TB: la / lb is MN-major); thread t's N / 2 accumulators go to out[t * N / 2 ...].
template <int N, int TA, int TB>
__global__ void wgmma_kernel(const uint16_t* A, const uint16_t* B, const float* c, float* out, Layout la, Layout lb) {
  EMBER_SHARED(Operands, s);
  const int t = static_cast<int>(threadIdx.x);
  for (int i = t; i < 64 * 16; i += 128)
    reinterpret_cast<uint16_t*>(s.a)[operand_offset(la, i / 16, i % 16) / 2] = A[i];
  for (int i = t; i < N * 16; i += 128) reinterpret_cast<uint16_t*>(s.b)[operand_offset(lb, i / 16, i % 16) / 2] = B[i];
  ptx::fence_proxy_async_shared();
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = c[t * (N / 2) + i];
  const uint64_t da = ptx::wgmma_desc(ptx::smem_address(s.a), la.lbo, la.sbo, la.swizzle);
  const uint64_t db = ptx::wgmma_desc(ptx::smem_address(s.b), lb.lbo, lb.sbo, lb.swizzle);
  ptx::wgmma_fence();
  ptx::wgmma_m64k16<N, TA, TB>(d, da, db, true, true);
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

template <int N, int TA = 0, int TB = 0>
void check_wgmma(const Layout& la, const Layout& lb) {
  INFO("N " << N << ", A " << (TA ? "MN" : "K") << "-major, swizzle " << la.span << " B; B " << (TB ? "MN" : "K")
            << "-major, swizzle " << lb.span << " B");
  std::vector<uint16_t> a(64 * 16), b(N * 16);
  std::vector<float> af(a.size()), bf(b.size()), c(128 * N / 2);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k) af[m * 16 + k] = static_cast<float>((m * 3 + k * 5) % 7 - 3);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < 16; ++k) bf[n * 16 + k] = static_cast<float>((n * 2 + k * 3) % 5 - 2);
  for (size_t i = 0; i < a.size(); ++i) a[i] = bf16_bits(af[i]);
  for (size_t i = 0; i < b.size(); ++i) b[i] = bf16_bits(bf[i]);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i % 13) * 0.5f;
  const Device gpu(DeviceType::cuda, 0);
  Tensor A = from_blob(a.data(), {static_cast<int64_t>(a.size())}, DType::bf16).to(gpu);
  Tensor B = from_blob(b.data(), {static_cast<int64_t>(b.size())}, DType::bf16).to(gpu);
  Tensor C = from_blob(c.data(), {static_cast<int64_t>(c.size())}, DType::f32).to(gpu);
  Tensor out = zeros({static_cast<int64_t>(c.size())}, TensorOptions(DType::f32).device(gpu));
  cuda::launch(wgmma_kernel<N, TA, TB>, 1, 128, 0, cuda::stream_for(out), static_cast<const uint16_t*>(A.data_ptr()),
               static_cast<const uint16_t*>(B.data_ptr()), C.data<float>(), out.data<float>(), la, lb);
  const std::vector<float> got = out.to(kCPU).to_vector<float>();
  int wrong = 0;
  for (int t = 0; t < 128; ++t) {
    const int w = t / 32, g = (t % 32) / 4, q = t % 4;
    for (int j = 0; j < N / 8; ++j)
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * w + g + (i >= 2 ? 8 : 0), col = 8 * j + 2 * q + (i & 1);
        const size_t r = static_cast<size_t>(t * (N / 2) + 4 * j + i);
        float want = c[r];
        for (int k = 0; k < 16; ++k) want += af[row * 16 + k] * bf[col * 16 + k];
        if (got[r] != want && ++wrong <= 5)
          FAIL_CHECK("thread " << t << " d[" << 4 * j + i << "] = D[" << row << "][" << col << "]: got " << got[r]
                               << ", want " << want);
      }
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("wgmma: m64nNk16 bf16 from shared-memory descriptors onto the documented fragments", "[gpu][ptx][wgmma]") {
  Tensor probe = zeros({1}, TensorOptions(DType::i32).device(Device(DeviceType::cuda, 0)));
  cuda::launch(wgmma_probe, 1, 1, 0, cuda::stream_for(probe), static_cast<int*>(probe.data_ptr()));
  if (probe.item<int>() == 0) {
    WARN("skipped: this test was built without sm_90a, which wgmma needs");
    return;
  }
  // no swizzle: core matrices of 8 rows x 16 bytes, the next 8 k at LBO, the next 8 rows at SBO
  const Layout none{ptx::WgmmaSwizzle::none, 0, 128, 256};
  // S-byte swizzles: rows of S bytes, 8-row atoms at SBO = 8 S (LBO unused for K-major)
  const Layout s32{ptx::WgmmaSwizzle::b32, 32, 16, 256}, s64{ptx::WgmmaSwizzle::b64, 64, 16, 512},
      s128{ptx::WgmmaSwizzle::b128, 128, 16, 1024};
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
