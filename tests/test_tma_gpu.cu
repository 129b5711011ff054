// TMA tensor copies (kernels/common/tma.cuh, core/cuda/tensor_map.h) against the layout the PTX ISA
// and the driver's documentation describe, byte position by byte position: a 2-d box of a 16-bit
// matrix lands densely (dimension 0 fastest), its 16-byte chunks permuted within each row by the
// 32-, 64- and 128-byte swizzles (chunk bits 4.. XOR row bits 7..), elements outside the matrix
// (negative coordinates, past the last row or column) as zeros, and the mbarrier's phase completes on
// the box's bytes; a tensor store writes a box laid out the same way back, skipping what lies
// outside the tensor. The expected positions are computed here, so the same test checks the
// simulator (sim/tma.cpp) and, on a GPU, the hardware.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/kernel.cuh"
#include "core/cuda/tensor_map.h"
#include "core/tensor.h"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/functional.h"

using namespace ember;

namespace {

struct alignas(1024) Tile {
  unsigned char bytes[8192];
};

// Thread 0 brings the box at (c0, c1) into `tile`; every thread waits for it and copies the tile's
// first box_bytes bytes out as they lie in shared memory.
__global__ void tma_tile_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1, uint32_t box_bytes,
                                unsigned char* out) {
  EMBER_SHARED(Tile, tile);
  EMBER_SHARED(uint64_t, bar);
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbarrier_arrive_expect_tx(&bar, box_bytes);
    ptx::tma_load_2d(tile.bytes, &map, c0, c1, &bar);
  }
  ptx::mbarrier_wait_parity(&bar, 0);
  for (uint32_t i = threadIdx.x; i < box_bytes; i += blockDim.x) out[i] = tile.bytes[i];
}

constexpr int kRows = 40, kCols = 72;  // a row is 144 bytes: a multiple of 16, as map strides must be

// Byte offset in shared memory of the box's linear byte `o` under a swizzle of `span` bytes.
EMBER_HD size_t swizzled(size_t o, int span) {
  if (span == 0) return o;
  const size_t mask = static_cast<size_t>(span / 16 - 1);
  return o ^ (((o >> 7) & mask) << 4);
}

// The value the store test writes at box element (r, c).
EMBER_HD uint16_t stored_value(uint32_t r, uint32_t c) { return static_cast<uint16_t>(50000 + r * 100 + c); }

// Every thread writes its share of a box0 x box1 box into `tile`, laid out (and swizzled) as a
// load would leave it; after the proxy fence and the barrier, thread 0 stores it at (c0, c1).
__global__ void tma_store_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1, uint32_t box0, uint32_t box1,
                                 int span) {
  EMBER_SHARED(Tile, tile);
  for (uint32_t i = threadIdx.x; i < box0 * box1; i += blockDim.x) {
    reinterpret_cast<uint16_t*>(tile.bytes)[swizzled(i * 2, span) / 2] = stored_value(i / box0, i % box0);
  }
  ptx::fence_proxy_async_shared();
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::tma_store_2d(&map, c0, c1, tile.bytes);
    ptx::bulk_commit_group();
    ptx::bulk_wait_group<0>();
  }
}

struct Case {
  cuda::TensorMapSwizzle swizzle;
  int span;             // bytes
  uint32_t box0, box1;  // columns, rows
};

void check_box(const Tensor& m, const std::vector<uint16_t>& host, const Case& k, int c0, int c1) {
  INFO("swizzle " << k.span << " B, box " << k.box0 << " x " << k.box1 << " at (" << c0 << ", " << c1 << ")");
  cuda::TensorMapSpec spec;
  spec.dtype = DType::f16;  // 16-bit elements; only their bits matter
  spec.base = m.data_ptr();
  spec.dims = {kCols, kRows};
  spec.strides_bytes = {kCols * 2};
  spec.box = {k.box0, k.box1};
  spec.swizzle = k.swizzle;
  const CUtensorMap map = cuda::make_tensor_map(spec);
  const uint32_t bytes = k.box0 * k.box1 * 2;
  Tensor out = zeros({static_cast<int64_t>(bytes)}, TensorOptions(DType::u8).device(m.device()));
  cuda::launch(tma_tile_kernel, 1, 64, 0, cuda::stream_for(out), map, c0, c1, bytes,
               static_cast<unsigned char*>(out.data_ptr()));
  const Tensor o = out.to(kCPU);
  const auto* got = static_cast<const unsigned char*>(o.data_ptr());
  int wrong = 0;
  for (uint32_t r = 0; r < k.box1; ++r)
    for (uint32_t c = 0; c < k.box0; ++c) {
      const int gr = c1 + static_cast<int>(r), gc = c0 + static_cast<int>(c);
      const bool inside = gr >= 0 && gr < kRows && gc >= 0 && gc < kCols;
      const uint16_t want = inside ? host[static_cast<size_t>(gr * kCols + gc)] : 0;
      uint16_t v;
      std::memcpy(&v, got + swizzled((r * k.box0 + c) * 2, k.span), 2);
      if (v != want && ++wrong <= 5) FAIL_CHECK("element (" << r << ", " << c << "): got " << v << ", want " << want);
    }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("tma: a tensor copy's box lands densely, swizzled, zero outside the tensor", "[gpu][ptx][tma]") {
  std::vector<uint16_t> host(kRows * kCols);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) host[static_cast<size_t>(r * kCols + c)] = static_cast<uint16_t>(r * 1000 + c + 1);
  Tensor m = from_blob(host.data(), {kRows * kCols}, DType::f16).to(Device(DeviceType::cuda, 0));
  const Case cases[] = {{cuda::TensorMapSwizzle::none, 0, 24, 10},
                        {cuda::TensorMapSwizzle::b32, 32, 16, 12},
                        {cuda::TensorMapSwizzle::b64, 64, 32, 16},
                        {cuda::TensorMapSwizzle::b128, 128, 64, 9}};
  for (const Case& k : cases) {
    check_box(m, host, k, 8, 3);    // inside
    check_box(m, host, k, -8, 35);  // left of column 0 and past the last row
    check_box(m, host, k, 40, -2);  // above row 0 and (for the wide boxes) past the last column
  }
}

TEST_CASE("tma: a tensor store writes its box where it lies inside the tensor", "[gpu][ptx][tma]") {
  std::vector<uint16_t> host(kRows * kCols);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint16_t>(i + 1);
  const Case cases[] = {{cuda::TensorMapSwizzle::none, 0, 24, 10}, {cuda::TensorMapSwizzle::b128, 128, 64, 9}};
  for (const Case& k : cases)
    for (const auto& [c0, c1] : {std::pair{8, 3}, std::pair{-8, 35}, std::pair{40, -2}}) {
      INFO("swizzle " << k.span << " B, box " << k.box0 << " x " << k.box1 << " at (" << c0 << ", " << c1 << ")");
      Tensor m = from_blob(host.data(), {kRows * kCols}, DType::f16).to(Device(DeviceType::cuda, 0));
      cuda::TensorMapSpec spec;
      spec.dtype = DType::f16;
      spec.base = m.data_ptr();
      spec.dims = {kCols, kRows};
      spec.strides_bytes = {kCols * 2};
      spec.box = {k.box0, k.box1};
      spec.swizzle = k.swizzle;
      cuda::launch(tma_store_kernel, 1, 64, 0, cuda::stream_for(m), cuda::make_tensor_map(spec), c0, c1, k.box0, k.box1,
                   k.span);
      const Tensor got_t = m.to(kCPU);
      const auto* got = static_cast<const uint16_t*>(got_t.data_ptr());
      int wrong = 0;
      for (int r = 0; r < kRows; ++r)
        for (int c = 0; c < kCols; ++c) {
          const int br = r - c1, bc = c - c0;
          const bool in_box = br >= 0 && br < static_cast<int>(k.box1) && bc >= 0 && bc < static_cast<int>(k.box0);
          const uint16_t want = in_box ? stored_value(static_cast<uint32_t>(br), static_cast<uint32_t>(bc))
                                       : host[static_cast<size_t>(r * kCols + c)];
          if (got[r * kCols + c] != want && ++wrong <= 5)
            FAIL_CHECK("matrix (" << r << ", " << c << "): got " << got[r * kCols + c] << ", want " << want);
        }
      CHECK(wrong == 0);
    }
}

TEST_CASE("tma: a tensor map the driver refuses names its arguments", "[gpu][ptx][tma]") {
  Tensor m = zeros({kRows * kCols}, TensorOptions(DType::f16).device(Device(DeviceType::cuda, 0)));
  cuda::TensorMapSpec spec;
  spec.dtype = DType::f16;
  spec.base = m.data_ptr();
  spec.dims = {kCols, kRows};
  spec.strides_bytes = {kCols * 2};
  spec.box = {7, 4};  // 14 bytes a row: not a multiple of 16
  CHECK_THROWS_WITH(cuda::make_tensor_map(spec),
                    Catch::Contains("cuTensorMapEncodeTiled refused the map") && Catch::Contains("box [7, 4]"));
  spec.box = {16, 4};
  spec.strides_bytes = {kCols * 2 + 8};  // not a multiple of 16
  CHECK_THROWS_WITH(cuda::make_tensor_map(spec), Catch::Contains("byte strides [152]"));
  spec.strides_bytes = {kCols * 2};
  spec.swizzle = cuda::TensorMapSwizzle::b32;
  spec.box = {32, 4};  // 64 bytes a row: wider than the 32-byte swizzle
  CHECK_THROWS_WITH(cuda::make_tensor_map(spec), Catch::Contains("refused"));
}
