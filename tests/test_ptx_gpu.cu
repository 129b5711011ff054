// The PTX wrappers of kernels/common/ptx.cuh against the fragment layouts the PTX ISA documents,
// position by position: every lane's registers after ldmatrix (x1, x2, x4, with and without .trans)
// and mma.sync.m16n8k16 (f16 and bf16), cp.async with its zero fill and group waits, and set.gt on
// pairs of halves. The expected values are computed here from the documented layouts with plain
// scalar code, so the same test checks the simulator's implementation (-DEMBER_CUDA_SIM=ON) and,
// on a GPU, the hardware.
#include <catch2/catch.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/cuda/kernel.cuh"
#include "core/half.h"
#include "core/tensor.h"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/ptx.cuh"

using namespace ember;

namespace {

// Four 8x8 b16 matrices in shared memory, element (m, r, c) = m * 64 + r * 8 + c; lane l points at
// row l % 8 of matrix l / 8. Each lane stores its `count` registers to out[l * 4 + i].
template <int COUNT, bool TRANS>
__global__ void ldmatrix_kernel(uint32_t* out) {
  EMBER_SHARED(uint16_t[4][8][8], tile);
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) tile[i / 64][(i / 8) % 8][i % 8] = static_cast<uint16_t>(i);
  __syncthreads();
  uint32_t r[COUNT];
  const void* row = &tile[lane / 8 % 4][lane % 8][0];
  if constexpr (COUNT == 1) {
    if constexpr (TRANS) ptx::ldmatrix_x1_trans(r, row);
    else ptx::ldmatrix_x1(r, row);
  } else if constexpr (COUNT == 2) {
    if constexpr (TRANS) ptx::ldmatrix_x2_trans(r, row);
    else ptx::ldmatrix_x2(r, row);
  } else {
    if constexpr (TRANS) ptx::ldmatrix_x4_trans(r, row);
    else ptx::ldmatrix_x4(r, row);
  }
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = i < COUNT ? r[i] : 0u;
}

// One m16n8k16 tile: each lane loads its fragments from the row-major A [16][16], B [16][8] (k, n)
// and C [16][8] by the documented layout, runs mma, and stores D by the documented layout.
__global__ void mma_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D, bool bf16) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  auto pack = [](uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); };
  uint32_t a[4] = {pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                   pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                   pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                   pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
  const uint32_t b0 = pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  const uint32_t b1 = pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  ptx::mma_m16n8k16(d, a, b0, b1, bf16);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// cp.async: thread i copies 16-byte chunk i of src into `first` (chunks with i % 3 == 2 are
// zero-filled instead) in one commit group, and chunk 63 - i into `second` in a later group. After
// wait_group 1 the first group has landed (for this thread; the barrier makes it so for all), after
// wait_group 0 the second too.
__global__ void cp_async_kernel(const uint4* src, uint4* out) {
  EMBER_SHARED(uint4[64], first);
  EMBER_SHARED(uint4[64], second);
  const int i = threadIdx.x;
  ptx::cp_async_16(&first[i], &src[i], i % 3 != 2);
  ptx::cp_async_commit();
  ptx::cp_async_16(&second[63 - i], &src[63 - i], true);
  ptx::cp_async_commit();
  ptx::cp_async_wait<1>();
  __syncthreads();
  out[i] = first[i];
  ptx::cp_async_wait<0>();
  __syncthreads();
  out[64 + i] = second[i];
}

// set.gt against 0 on pairs of halves: word i holds bit patterns 2i and 2i + 1 (every one of the
// 65536 across the words).
__global__ void gt_zero_kernel(uint32_t* out, bool bf16) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < 32768;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    const uint32_t x = static_cast<uint32_t>(2 * i) | (static_cast<uint32_t>(2 * i + 1) << 16);
    out[i] = ptx::gt_zero_mask_x2(x, bf16);
  }
}

template <class T>
std::vector<T> to_host(const Tensor& t) {
  Tensor c = t.to(kCPU);
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<T>(p, p + c.nbytes() / sizeof(T));
}

Tensor device_buffer(int64_t bytes) {
  return empty({bytes}, TensorOptions(DType::u8).device(Device(DeviceType::cuda, 0)));
}

// A device copy of host words (16-bit values travel in an f16 tensor: only the bits matter).
template <class T>
Tensor to_device(std::vector<T>& v) {
  const DType dt = sizeof(T) == 2 ? DType::f16 : (std::is_same_v<T, float> ? DType::f32 : DType::i32);
  return from_blob(v.data(), {static_cast<int64_t>(v.size())}, dt).to(Device(DeviceType::cuda, 0));
}

template <int COUNT, bool TRANS>
void check_ldmatrix() {
  Tensor out = device_buffer(32 * 4 * 4);
  cudaStream_t s = cuda::stream_for(out);
  cuda::launch(ldmatrix_kernel<COUNT, TRANS>, 1, 32, 0, s, static_cast<uint32_t*>(out.data_ptr()));
  std::vector<uint32_t> r = to_host<uint32_t>(out);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int m = 0; m < COUNT; ++m) {
      // documented: lane 4g+t holds (g, 2t), (g, 2t+1) of matrix m; with .trans (2t, g), (2t+1, g)
      const uint32_t lo = TRANS ? m * 64 + (2 * t) * 8 + g : m * 64 + g * 8 + 2 * t;
      const uint32_t hi = TRANS ? m * 64 + (2 * t + 1) * 8 + g : m * 64 + g * 8 + 2 * t + 1;
      INFO("ldmatrix x" << COUNT << (TRANS ? ".trans" : "") << " lane " << lane << " register " << m);
      CHECK(r[lane * 4 + m] == (lo | (hi << 16)));
    }
  }
}

}  // namespace

TEST_CASE("ptx: ldmatrix fragments follow the documented layout", "[gpu][ptx]") {
  check_ldmatrix<1, false>();
  check_ldmatrix<2, false>();
  check_ldmatrix<4, false>();
  check_ldmatrix<1, true>();
  check_ldmatrix<2, true>();
  check_ldmatrix<4, true>();
}

TEST_CASE("ptx: mma.sync m16n8k16 f16 and bf16 against a scalar reference", "[gpu][ptx]") {
  for (bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "f16"));
    // small integers and halves: every product and sum is exact in f32, so the check is exact
    std::vector<uint16_t> a(256), b(128);
    std::vector<float> af(256), bf(128), c(128);
    for (int i = 0; i < 256; ++i) {
      af[i] = static_cast<float>((i * 7) % 11 - 5) * 0.5f;
      a[i] = bf16 ? BFloat16(af[i]).bits : Half(af[i]).bits;
    }
    for (int i = 0; i < 128; ++i) {
      bf[i] = static_cast<float>((i * 5) % 9 - 4);
      b[i] = bf16 ? BFloat16(bf[i]).bits : Half(bf[i]).bits;
      c[i] = static_cast<float>(i % 13) - 6.0f;
    }
    Tensor A = to_device(a), B = to_device(b), C = to_device(c);
    Tensor D = empty({128}, TensorOptions(DType::f32).device(Device(DeviceType::cuda, 0)));
    cuda::launch(mma_kernel, 1, 32, 0, cuda::stream_for(D), static_cast<const uint16_t*>(A.data_ptr()),
                 static_cast<const uint16_t*>(B.data_ptr()), static_cast<const float*>(C.data_ptr()),
                 static_cast<float*>(D.data_ptr()), bf16);
    std::vector<float> d = to_host<float>(D);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        float ref = c[m * 8 + n];
        for (int k = 0; k < 16; ++k) ref += af[m * 16 + k] * bf[k * 8 + n];
        INFO("D[" << m << "][" << n << "]");
        CHECK(d[m * 8 + n] == ref);
      }
  }
}

TEST_CASE("ptx: cp.async copies, zero-fills and lands by the group wait", "[gpu][ptx]") {
  std::vector<uint32_t> src(256);
  for (int i = 0; i < 256; ++i) src[i] = 0x1000u + static_cast<uint32_t>(i);
  Tensor S = to_device(src);
  Tensor O = empty({512}, TensorOptions(DType::i32).device(Device(DeviceType::cuda, 0)));
  cuda::launch(cp_async_kernel, 1, 64, 0, cuda::stream_for(O), static_cast<const uint4*>(S.data_ptr()),
               static_cast<uint4*>(O.data_ptr()));
  std::vector<uint32_t> o = to_host<uint32_t>(O);
  for (int i = 0; i < 64; ++i)
    for (int w = 0; w < 4; ++w) {
      INFO("chunk " << i << " word " << w);
      CHECK(o[i * 4 + w] == (i % 3 == 2 ? 0u : src[i * 4 + w]));
      CHECK(o[256 + i * 4 + w] == src[i * 4 + w]);
    }
}

TEST_CASE("ptx: set.gt on pairs of f16 and bf16 against 0, every bit pattern", "[gpu][ptx]") {
  for (bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "f16"));
    Tensor out = device_buffer(32768 * 4);
    cuda::launch(gt_zero_kernel, 64, 256, 0, cuda::stream_for(out), static_cast<uint32_t*>(out.data_ptr()), bf16);
    std::vector<uint32_t> r = to_host<uint32_t>(out);
    int kept = 0;
    for (uint32_t v = 0; v < 65536; ++v) {
      const uint16_t bits = static_cast<uint16_t>(v);
      // relu_backward's rule: keep where y > 0 (NaN, -0, +0 and negatives are not)
      const bool want =
          bf16 ? static_cast<float>(BFloat16::from_bits(bits)) > 0.f : static_cast<float>(Half::from_bits(bits)) > 0.f;
      const uint32_t got = (r[v / 2] >> (16 * (v % 2))) & 0xffffu;
      kept += want;
      if (got != (want ? 0xffffu : 0u)) {
        INFO("bits 0x" << std::hex << v);
        CHECK(got == (want ? 0xffffu : 0u));
      }
    }
    CHECK(kept == (bf16 ? 0x7f80 : 0x7c00));  // the positive finite values and +inf
  }
}
