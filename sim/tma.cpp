// TMA in the simulator: the driver's cuTensorMapEncodeTiled (reached, as on a GPU, through
// cudaGetDriverEntryPointByVersion) with the argument rules cuda.h documents, and the tensor copy
// cp.async.bulk.tensor (global -> shared, tile mode, and multicast to the blocks of a cluster) of
// kernels/common/tma.cuh and cluster.cuh, which lands like any bulk copy (Note [bulk copies land
// late] in mbarrier.cpp).
//
// Note [simulated tensor maps]: the map's 128 bytes hold the simulator's own encoding (a tag, the
// global address, dims, strides, box, element strides, data type, swizzle and fill); a kernel reads
// it only through the copy instruction, as on a GPU. The copy fills the box in shared memory
// densely, dimension 0 fastest, ceil(box[i] / elementStrides[i]) elements along dimension i (one
// per element stride; dimension 0 has none), elements outside the tensor (coordinates may be
// negative) as zeros, or NaN with the NaN fill for float types. A swizzle of S bytes (32, 64, 128)
// permutes the 16-byte chunks of each S-byte row: the chunk bits [4, 4 + log2(S/16)) of the shared
// address are XORed with the bits [7, 7 + log2(S/16)) (the pattern repeats every 8 rows). Not
// emulated (the encode answers CUDA_ERROR_NOT_SUPPORTED): interleaved layouts, the packed 4- and
// 6-bit types, the 128B_ATOM swizzles, and a swizzled box whose rows are narrower than the swizzle.
//
// Note [async proxy]: a tensor store reads its shared-memory box through the async proxy, which
// does not see the generic proxy's writes (ordinary stores) unless the writing thread ran
// fence.proxy.async after them; and, as any read, it must be ordered after the writes of other
// threads (__syncthreads, or a warp collective among the lanes of one warp). So at the store,
// racecheck looks at each byte's last write: a write by another thread in the current barrier
// interval (not a lane of the storing warp with a collective since), or any write whose thread
// has run no fence.proxy.async since (the shadow keeps the writer's fence count), is reported. The store is
// performed when its thread's cp.async.bulk.wait_group covers its group; until then a write into
// its source is reported (its elements outside the tensor are not written).
#include <cuda.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "sim/cluster_api.h"
#include "sim/internal.h"
#include "sim/mbarrier_api.h"

namespace ember::sim {

namespace {

constexpr uint64_t kTag = 0x70616d74726d6265ull;  // "ebmrtmap"

int elem_bytes(int dt) {
  switch (dt) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    default: return 0;  // the packed sub-byte types
  }
}

bool is_float(int dt) {
  return dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || dt == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
         dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 || dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ ||
         dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT64 || dt == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 ||
         dt == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
}

int swizzle_span(int sw) {
  switch (sw) {
    case CU_TENSOR_MAP_SWIZZLE_NONE: return 0;
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B: return 128;
    default: return -1;  // the 128B_ATOM variants
  }
}

// The words of the map: [0] tag, [1] address, [2..6] dims, [7..10] strides of dims 1..4, [11] box - 1
// (8 bits each), [12] element strides - 1 (4 bits each) | type << 20 | rank << 28 | swizzle << 31 |
// NaN fill << 34.
void encode(CUtensorMap* map, int dt, int rank, const void* addr, const cuuint64_t* dims, const cuuint64_t* strides,
            const cuuint32_t* box, const cuuint32_t* estr, int sw, bool nan_fill) {
  uint64_t w[16] = {};
  w[0] = kTag;
  w[1] = reinterpret_cast<uintptr_t>(addr);
  for (int i = 0; i < rank; ++i) {
    w[2 + i] = dims[i];
    if (i > 0) w[6 + i] = strides[i - 1];
    w[11] |= static_cast<uint64_t>(box[i] - 1) << (8 * i);
    w[12] |= static_cast<uint64_t>(estr[i] - 1) << (4 * i);
  }
  w[12] |= static_cast<uint64_t>(dt) << 20 | static_cast<uint64_t>(rank) << 28 | static_cast<uint64_t>(sw) << 31 |
           static_cast<uint64_t>(nan_fill ? 1 : 0) << 34;
  static_assert(sizeof(CUtensorMap) == sizeof w);
  std::memcpy(map, w, sizeof w);
}

bool decode(const void* map, TmaBox& b) {
  uint64_t w[16];
  std::memcpy(w, map, sizeof w);
  if (w[0] != kTag) return false;
  const int dt = static_cast<int>((w[12] >> 20) & 0xff);
  b.base = w[1];
  b.rank = static_cast<int>((w[12] >> 28) & 7);
  b.elem = elem_bytes(dt);
  b.float_type = is_float(dt);
  b.swizzle = swizzle_span(static_cast<int>((w[12] >> 31) & 7));
  b.nan_fill = ((w[12] >> 34) & 1) != 0;
  for (int i = 0; i < b.rank; ++i) {
    b.dims[i] = w[2 + i];
    b.strides[i] = i == 0 ? static_cast<uint64_t>(b.elem) : w[6 + i];
    b.box[i] = static_cast<uint32_t>((w[11] >> (8 * i)) & 0xff) + 1;
    b.estride[i] = i == 0 ? 1 : static_cast<uint32_t>((w[12] >> (4 * i)) & 0xf) + 1;
  }
  return true;
}

// The shared byte offset where the box's linear byte `o` lands (Note [simulated tensor maps]).
size_t swizzled(size_t o, int span) {
  if (span == 0) return o;
  const size_t mask = static_cast<size_t>(span / 16 - 1);
  return o ^ (((o >> 7) & mask) << 4);
}

// Calls f(global coordinates, linear element index) for every element of the box, dimension 0 fastest.
template <class F>
void for_each_element(const TmaBox& b, F&& f) {
  int64_t g[5];
  uint32_t k[5] = {};
  const uint32_t n0 = b.count(0);
  for (uint64_t linear = 0;; linear += n0) {
    for (int i = 1; i < b.rank; ++i)
      g[i] = static_cast<int64_t>(b.coord[i]) + static_cast<int64_t>(k[i] * b.estride[i]);
    f(g, linear, n0);
    int i = 1;
    for (; i < b.rank; ++i) {
      if (++k[i] < b.count(i)) break;
      k[i] = 0;
    }
    if (i >= b.rank) return;
  }
}

bool row_inside(const TmaBox& b, const int64_t* g) {
  for (int i = 1; i < b.rank; ++i)
    if (g[i] < 0 || g[i] >= static_cast<int64_t>(b.dims[i])) return false;
  return true;
}

void fill_value(const TmaBox& b, unsigned char* dst) {
  std::memset(dst, 0, static_cast<size_t>(b.elem));
  if (!(b.nan_fill && b.float_type)) return;
  if (b.elem == 2) {
    const uint16_t nan = 0x7fff;  // f16 and bf16 NaN
    std::memcpy(dst, &nan, 2);
  } else if (b.elem == 4) {
    const float nan = std::nanf("");
    std::memcpy(dst, &nan, 4);
  } else {
    const double nan = std::nan("");
    std::memcpy(dst, &nan, 8);
  }
}

}  // namespace

void land_tma_box(Block& blk, unsigned char* dst, const TmaBox& b) {
  const size_t elem = static_cast<size_t>(b.elem);
  const size_t off0 = static_cast<size_t>(dst - blk.smem);
  for_each_element(b, [&](const int64_t* g, uint64_t linear, uint32_t n0) {
    const bool inside = row_inside(b, g);
    for (uint32_t k0 = 0; k0 < n0; ++k0) {
      const int64_t x = static_cast<int64_t>(b.coord[0]) + k0;
      unsigned char* out = dst - off0 + swizzled(off0 + (linear + k0) * elem, b.swizzle);
      if (!inside || x < 0 || x >= static_cast<int64_t>(b.dims[0])) {
        fill_value(b, out);
        continue;
      }
      uintptr_t src = b.base + static_cast<uint64_t>(x) * elem;
      for (int i = 1; i < b.rank; ++i) src += static_cast<uint64_t>(g[i]) * b.strides[i];
      raw_copy(out, reinterpret_cast<const void*>(src), elem);
    }
  });
}

void store_tma_box(Block& blk, const unsigned char* src, const TmaBox& b) {
  const size_t elem = static_cast<size_t>(b.elem);
  const size_t off0 = static_cast<size_t>(src - blk.smem);
  for_each_element(b, [&](const int64_t* g, uint64_t linear, uint32_t n0) {
    if (!row_inside(b, g)) return;
    for (uint32_t k0 = 0; k0 < n0; ++k0) {
      const int64_t x = static_cast<int64_t>(b.coord[0]) + k0;
      if (x < 0 || x >= static_cast<int64_t>(b.dims[0])) continue;
      uintptr_t dst = b.base + static_cast<uint64_t>(x) * elem;
      for (int i = 1; i < b.rank; ++i) dst += static_cast<uint64_t>(g[i]) * b.strides[i];
      raw_copy(reinterpret_cast<void*>(dst), src - off0 + swizzled(off0 + (linear + k0) * elem, b.swizzle), elem);
    }
  });
}

namespace {

// The box of a tensor copy at `coords` into or out of `smem` (checked: the map, its rank, the shared
// address and its alignment, and every global row inside the tensor as an access of `kind`).
// (A value, not on the heap: a fault ends the thread without unwinding its stack.)
TmaBox checked_box(Thread& t, const void* tensor_map, const int32_t* coords, int rank, const void* smem, Access kind,
                   const void* pc, std::source_location loc) {
  Block& blk = *t.block;
  check_access(t, reinterpret_cast<uintptr_t>(tensor_map), sizeof(CUtensorMap), Access::read, pc, false);
  TmaBox box;
  if (!decode(tensor_map, box))
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "cp.async.bulk.tensor with a tensor map that cuTensorMapEncodeTiled did not make", loc);
  if (box.rank != rank)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "cp.async.bulk.tensor." + std::to_string(rank) + "d with a " + std::to_string(box.rank) +
                           "-dimensional tensor map",
                       loc);
  for (int i = 0; i < rank; ++i) box.coord[i] = coords[i];
  const size_t off = static_cast<size_t>(static_cast<const unsigned char*>(smem) - blk.smem);
  if (off >= blk.smem_capacity)
    EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress, "cp.async.bulk.tensor destination is not shared memory", loc);
  const size_t align = box.swizzle == 0 ? 128 : static_cast<size_t>(box.swizzle) * 8;
  if (off % align != 0)
    EMBER_SIM_FAULT_AT(cudaErrorMisalignedAddress,
                       "cp.async.bulk.tensor destination at shared offset " + std::to_string(off) + " is not " +
                           std::to_string(align) + "-byte aligned" +
                           (box.swizzle != 0 ? " (a swizzled box starts where its pattern repeats)" : ""),
                       loc);
  // the global rows inside the tensor: in bounds of a live allocation
  for_each_element(box, [&](const int64_t* g, uint64_t, uint32_t n0) {
    if (!row_inside(box, g)) return;
    const int64_t lo = std::max<int64_t>(box.coord[0], 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(box.coord[0]) + n0, static_cast<int64_t>(box.dims[0]));
    if (lo >= hi) return;
    uintptr_t src = box.base + static_cast<uint64_t>(lo) * static_cast<uint64_t>(box.elem);
    for (int i = 1; i < box.rank; ++i) src += static_cast<uint64_t>(g[i]) * box.strides[i];
    check_access(t, src, static_cast<size_t>(hi - lo) * static_cast<size_t>(box.elem), kind, pc);
  });
  return box;
}

}  // namespace

void tma_load(void* smem_dst, const void* tensor_map, const int32_t* coords, int rank, uint64_t* bar,
              std::source_location loc) {
  Thread& t = thread_in_kernel("cp.async.bulk.tensor");
  const void* pc = __builtin_return_address(0);
  BulkCopy c{static_cast<unsigned char*>(smem_dst), nullptr, 0, bar, t.sid, loc};
  c.box = checked_box(t, tensor_map, coords, rank, smem_dst, Access::read, pc, loc);
  c.has_box = true;
  c.bytes = c.box.bytes();
  issue_bulk_copy(t, c, pc);
}

// Note [multicast]: one copy of the box for every block named in the mask, at the same shared
// offsets of that block (destination and mbarrier), each landing and checked as any bulk copy into
// that block (its barrier initialised, its destination declared and free of copies in flight and
// of wgmma operands still read). The global box is read (and checked) once.
void tma_load_multicast(void* smem_dst, const void* tensor_map, const int32_t* coords, int rank, uint64_t* bar,
                        uint16_t cta_mask, std::source_location loc) {
  Thread& t = thread_in_kernel("cp.async.bulk.tensor.multicast::cluster");
  const void* pc = __builtin_return_address(0);
  Block& me = *t.block;
  const Cluster& cl = *me.cluster;
  char mask[8];
  std::snprintf(mask, sizeof mask, "%04x", static_cast<unsigned>(cta_mask));
  if (cta_mask == 0 || (cta_mask >> cl.size) != 0)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "cp.async.bulk.tensor.multicast::cluster with CTA mask 0x" + std::string(mask) +
                           " in a cluster of " + std::to_string(cl.size) +
                           " blocks: the mask names at least one block, and only the cluster's ranks",
                       loc);
  BulkCopy c{static_cast<unsigned char*>(smem_dst), nullptr, 0, bar, t.sid, loc};
  c.box = checked_box(t, tensor_map, coords, rank, smem_dst, Access::read, pc, loc);
  c.has_box = true;
  c.bytes = c.box.bytes();
  const size_t dst_off = static_cast<size_t>(c.dst - me.smem);
  const size_t bar_off = static_cast<size_t>(reinterpret_cast<unsigned char*>(bar) - me.smem);
  for (int r = 0; r < cl.size; ++r) {
    if (((cta_mask >> r) & 1u) == 0) continue;
    Block& dst = *cl.blocks[r];
    if (dst.done())
      EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure, "cp.async.bulk.tensor.multicast::cluster into " + exited_block(dst),
                         loc);
    BulkCopy rc = c;
    rc.dst = dst.smem + dst_off;
    rc.bar = reinterpret_cast<uint64_t*>(dst.smem + bar_off);
    issue_bulk_copy(t, dst, rc, pc);
  }
}

void tma_store(const void* tensor_map, const int32_t* coords, int rank, const void* smem_src,
               std::source_location loc) {
  Thread& t = thread_in_kernel("cp.async.bulk.tensor (store)");
  const void* pc = __builtin_return_address(0);
  auto* src = const_cast<unsigned char*>(static_cast<const unsigned char*>(smem_src));
  BulkCopy c{src, nullptr, 0, nullptr, t.sid, loc};
  c.box = checked_box(t, tensor_map, coords, rank, smem_src, Access::write, pc, loc);
  c.has_box = true;
  c.bytes = c.box.bytes();
  c.store = true;
  c.group = t.bulk_groups_committed + 1;
  check_async_proxy_read(t, static_cast<size_t>(src - t.block->smem), c.bytes, loc);
  issue_bulk_copy(t, c, pc);
}

void bulk_commit_group() { ++thread_in_kernel("cp.async.bulk.commit_group").bulk_groups_committed; }

void bulk_wait_group(int n) {
  Thread& t = thread_in_kernel("cp.async.bulk.wait_group");
  Block& b = *t.block;
  // groups 1..committed exist; all but the newest n must be done (read, and here written too)
  const uint64_t done_upto =
      t.bulk_groups_committed > static_cast<uint64_t>(n) ? t.bulk_groups_committed - static_cast<uint64_t>(n) : 0;
  std::vector<BulkCopy> keep;
  for (BulkCopy& c : *b.bulk) {
    if (c.store && c.issuer == t.sid && c.group <= done_upto) store_tma_box(b, c.dst, c.box);
    else keep.push_back(std::move(c));
  }
  *b.bulk = std::move(keep);
}

void fence_proxy_async() { ++thread_in_kernel("fence.proxy.async").proxy_fences; }

// The driver's cuTensorMapEncodeTiled, with the argument rules cuda.h lists for it.
CUresult encode_tiled(CUtensorMap* map, CUtensorMapDataType dt, cuuint32_t rank, void* addr, const cuuint64_t* dims,
                      const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* estr,
                      CUtensorMapInterleave interleave, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                      CUtensorMapFloatOOBfill oob) {
  if (map == nullptr || reinterpret_cast<uintptr_t>(map) % 64 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<int>(dt) < 0 || dt > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B) return CUDA_ERROR_INVALID_VALUE;
  if (rank == 0 || rank > 5 || dims == nullptr || box == nullptr || estr == nullptr || (rank > 1 && strides == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  if (interleave < CU_TENSOR_MAP_INTERLEAVE_NONE || interleave > CU_TENSOR_MAP_INTERLEAVE_32B ||
      (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3))
    return CUDA_ERROR_INVALID_VALUE;
  if (addr == nullptr || reinterpret_cast<uintptr_t>(addr) % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (sw < CU_TENSOR_MAP_SWIZZLE_NONE || sw > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B) return CUDA_ERROR_INVALID_VALUE;
  if (l2 < CU_TENSOR_MAP_L2_PROMOTION_NONE || l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B) return CUDA_ERROR_INVALID_VALUE;
  if (oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE && oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    return CUDA_ERROR_INVALID_VALUE;
  const int es = elem_bytes(dt);
  if (oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE && !is_float(dt)) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
    if (estr[i] == 0 || estr[i] > 8) return CUDA_ERROR_INVALID_VALUE;
    if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (uint64_t{1} << 40))) return CUDA_ERROR_INVALID_VALUE;
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_32B && sw != CU_TENSOR_MAP_SWIZZLE_32B) return CUDA_ERROR_INVALID_VALUE;
  // what the simulator does not emulate (Note [simulated tensor maps])
  const int span = swizzle_span(sw);
  if (es == 0 || interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || span < 0) return CUDA_ERROR_NOT_SUPPORTED;
  const uint64_t inner = static_cast<uint64_t>(box[0]) * static_cast<uint64_t>(es);
  if (inner % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (span > 0 && inner > static_cast<uint64_t>(span)) return CUDA_ERROR_INVALID_VALUE;
  if (span > 0 && inner != static_cast<uint64_t>(span)) return CUDA_ERROR_NOT_SUPPORTED;
  encode(map, dt, static_cast<int>(rank), addr, dims, strides, box, estr, sw,
         oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
  return CUDA_SUCCESS;
}

}  // namespace ember::sim

extern "C" {

// The driver entry points the simulator provides: cuTensorMapEncodeTiled (tensor maps for TMA).
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || fn == nullptr) return cudaErrorInvalidValue;
  const bool known = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *fn = known ? reinterpret_cast<void*>(&ember::sim::encode_tiled) : nullptr;
  if (status != nullptr) *status = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

}  // extern "C"
