// wgmma in the simulator: wgmma.mma_async m64nNk16 with bf16/f16 operands and m64nNk8 with tf32
// operands, both in shared memory, f32 accumulators, for the wrappers of kernels/common/wgmma.cuh.
//
// Note [wgmma operand layouts]: a shared-memory matrix descriptor holds the operand's start
// address, LBO and SBO (each in 16-byte units: bits 0-13, 16-29, 32-45), a base offset (bits
// 49-51; the simulator takes 0 only) and the swizzle (bits 62-63: 0 none, 1 128 B, 2 64 B, 3 32 B).
// The simulator reads the canonical layouts of the PTX ISA as it understands them, for A as 64 x K
// and B as N x K, K = 32 bytes of elements (16 of f16/bf16, 8 of tf32; row r: m or n; column k;
// element size e):
//   K-major (k contiguous; the default)
//     no swizzle   8 x 16-byte core matrices: r / 8 steps SBO, (k e) / 16 steps LBO, then
//                  (r % 8) * 16 + (k e) % 16 within the core matrix;
//     S-byte swizzle  rows of S bytes in atoms of 8 rows: r / 8 steps SBO, (r % 8) * S + k e within
//                  the atom (the start may sit inside a row, at a later k of the same atom);
//   MN-major (r contiguous; the instruction's transpose bit for that operand)
//     no swizzle   core matrices of 8 k rows of 16 bytes (8 r): r / 8 steps SBO, k / 8 steps LBO,
//                  then (k % 8) * 16 + (r % 8) e within the core matrix;
//     S-byte swizzle  k rows of S bytes (S / e consecutive r) in atoms of 8 rows: r / (S / e) steps
//                  LBO, k / 8 steps SBO, (k % 8) * S + (r % (S / e)) e within the atom;
//   then, with a swizzle, the address's 16-byte chunk bits XORed with its row bits, as TMA's
//   swizzle (sim/tma.cpp), so a TMA box lands in either layout as the MMA reads it.
// tf32 operands are K-major only (the ISA has no transpose for them): 4-byte elements, read as the
// f32 bit pattern with its low 13 mantissa bits ignored (truncated: a kernel that wants them rounded
// rounds them itself, cvt.rna.tf32.f32, before they reach shared memory).
// D is the thread's registers in the m16n8 pattern per 8 columns: thread t of the warpgroup (warp
// w = t / 32, lane l, g = l / 4, q = l % 4) holds for each j < N / 8 d[4j..4j+3] = D[16w+g][8j+2q],
// D[16w+g][8j+2q+1], D[16w+g+8][8j+2q], D[16w+g+8][8j+2q+1]. The products are exact, summed in double
// and rounded once (as the simulator's mma.sync). The operation is computed when a wgmma.wait_group
// covers its group, so accumulators read before the wait hold their old values, and its operands
// are read then too; at issue, each operand byte must be visible to the async proxy (Note [async
// proxy] in tma.cpp: written by TMA, or by a thread that ran fence.proxy.async since). This reading
// of the ISA has not run on a GPU: tests/test_wgmma_sm90a_gpu.cu is the check when one runs it.
// Until its group is waited for, an operation still reads its operands: a bulk or tensor copy
// issued into the span of shared bytes either operand covers is a fault (a pipeline stage refilled
// before the MMAs reading it completed; the span is the envelope of the operand's bytes, so a copy
// into bytes between them counts too).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "sim/half.h"
#include "sim/internal.h"
#include "sim/mbarrier_api.h"

namespace ember::sim {

namespace {

struct Desc {
  size_t start = 0, lbo = 0, sbo = 0;
  int base_offset = 0, span = 0;  // span: 0, or the swizzle in bytes
};

Desc decode(uint64_t d) {
  Desc r;
  r.start = static_cast<size_t>(d & 0x3fff) << 4;
  r.lbo = static_cast<size_t>((d >> 16) & 0x3fff) << 4;
  r.sbo = static_cast<size_t>((d >> 32) & 0x3fff) << 4;
  r.base_offset = static_cast<int>((d >> 49) & 7);
  const int mode = static_cast<int>(d >> 62);
  r.span = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
  return r;
}

// The shared offset of element (r, k) of an operand, K-major or MN-major (Note [wgmma operand
// layouts]).
size_t element_offset(const Desc& d, int r, int k, int elem, bool mn_major) {
  const auto z = [](int v) { return static_cast<size_t>(v); };
  const size_t e = z(elem);
  size_t o;
  if (!mn_major) {
    const size_t kb = z(k) * e, row_group = z(r / 8) * d.sbo, row = z(r % 8);
    if (d.span == 0) return d.start + row_group + (kb / 16) * d.lbo + row * 16 + kb % 16;
    o = d.start + row_group + row * z(d.span) + kb;
  } else {
    if (d.span == 0) return d.start + z(r / 8) * d.sbo + z(k / 8) * d.lbo + z(k % 8) * 16 + z(r % 8) * e;
    const int per_row = d.span / elem;  // consecutive r in one S-byte row
    o = d.start + z(r / per_row) * d.lbo + z(k / 8) * d.sbo + z(k % 8) * z(d.span) + z(r % per_row) * e;
  }
  const size_t mask = z(d.span / 16 - 1);
  return o ^ (((o >> 7) & mask) << 4);
}

int element_bytes(WgmmaType type) { return type == WgmmaType::tf32 ? 4 : 2; }

float element(const Block& b, const Desc& d, int r, int k, WgmmaType type, bool mn_major) {
  if (type == WgmmaType::tf32) {
    uint32_t bits;
    std::memcpy(&bits, b.smem + element_offset(d, r, k, 4, mn_major), 4);
    bits &= ~uint32_t{0x1fff};
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, b.smem + element_offset(d, r, k, 2, mn_major), 2);
  return type == WgmmaType::bf16 ? bf16_to_float(bits) : f16_to_float(bits);
}

// Every element of a rows x (32 / e) operand inside the block's shared declarations and visible to
// the async proxy; lo and hi get the span of shared bytes it covers. 16 / e elements (k0.. of a row
// when K-major; rows r0..r0+7 of a column when MN-major, e = 2) are one 16-byte row of a core
// matrix in the layouts the descriptors encode, so they are checked as one read; a descriptor that
// places them otherwise is checked element by element. (Every thread of the warpgroup checks the
// operand, so this is most of the emulation's cost.)
void check_operand(Thread& t, const Desc& d, int rows, int e, bool mn_major, const char* which, size_t& lo, size_t& hi,
                   std::source_location loc) {
  lo = SIZE_MAX;
  hi = 0;
  if (d.base_offset != 0)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       std::string("wgmma descriptor of ") + which + " with a base offset (not emulated)", loc);
  const auto read = [&](size_t off, size_t bytes, int r, int k) {
    if (off + bytes > t.block->smem_capacity)
      EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress,
                         std::string("wgmma operand ") + which + " reaches past shared memory (element " +
                             std::to_string(r) + ", " + std::to_string(k) + ")",
                         loc);
    check_async_proxy_read(t, off, bytes, loc);
    lo = std::min(lo, off);
    hi = std::max(hi, off + bytes);
  };
  const auto at = [&](int r0, int k0, int i) { return mn_major ? std::pair{r0 + i, k0} : std::pair{r0, k0 + i}; };
  const int per16 = 16 / e, kext = 32 / e;  // elements in 16 bytes; k of one instruction
  for (int r0 = 0; r0 < rows; r0 += mn_major ? per16 : 1)
    for (int k0 = 0; k0 < kext; k0 += mn_major ? 1 : per16) {
      const auto [rl, kl] = at(r0, k0, per16 - 1);
      const size_t first = element_offset(d, r0, k0, e, mn_major);
      if (first % 16 == 0 && element_offset(d, rl, kl, e, mn_major) == first + 16 - static_cast<size_t>(e)) {
        read(first, 16, r0, k0);
        continue;
      }
      for (int i = 0; i < per16; ++i) {
        const auto [r, k] = at(r0, k0, i);
        read(element_offset(d, r, k, e, mn_major), static_cast<size_t>(e), r, k);
      }
    }
}

void compute(const Thread& t, const WgmmaOp& op) {
  const Block& b = *t.block;
  const Desc da = decode(op.desc_a), db = decode(op.desc_b);
  const int wt = t.linear % 128, w = wt / 32, l = wt % 32, g = l / 4, q = l % 4;
  for (int j = 0; j < op.n / 8; ++j)
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * w + g + (i >= 2 ? 8 : 0), col = 8 * j + 2 * q + (i & 1);
      double s = op.scale_d ? static_cast<double>(op.d[4 * j + i]) : 0.0;
      for (int k = 0; k < 32 / element_bytes(op.type); ++k)
        s += static_cast<double>(element(b, da, row, k, op.type, op.trans_a)) *
             static_cast<double>(element(b, db, col, k, op.type, op.trans_b));
      op.d[4 * j + i] = static_cast<float>(s);
    }
}

}  // namespace

void wgmma(float* d, int n, uint64_t desc_a, uint64_t desc_b, bool scale_d, WgmmaType type, bool trans_a, bool trans_b,
           std::source_location loc) {
  Thread& t = thread_in_kernel("wgmma.mma_async");
  const dim3 bd = t.block->launch->block;
  if ((bd.x * bd.y * bd.z) % 128 != 0)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "wgmma.mma_async in a block of " + std::to_string(bd.x * bd.y * bd.z) +
                           " threads: warpgroups are 128 threads, so the block must be a multiple of 128",
                       loc);
  if (n < 8 || n > 256 || n % 8 != 0)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure, "wgmma.mma_async with N = " + std::to_string(n), loc);
  if (type == WgmmaType::tf32 && (trans_a || trans_b))
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "wgmma.mma_async .tf32 with a transposed (MN-major) operand: tf32 operands are K-major only",
                       loc);
  WgmmaOp op{d, n, desc_a, desc_b, scale_d, type, trans_a, trans_b, t.wgmma_groups_committed + 1, {}, {}};
  const int e = element_bytes(type);
  check_operand(t, decode(desc_a), 64, e, trans_a, "A", op.lo[0], op.hi[0], loc);
  check_operand(t, decode(desc_b), n, e, trans_b, "B", op.lo[1], op.hi[1], loc);
  t.wgmma.push_back(op);
}

void check_wgmma_operands_free(Thread& t, const Block& b, size_t off, size_t n, std::source_location loc) {
  for (int i = 0; i < b.nthreads; ++i)
    for (const WgmmaOp& op : b.threads[i].wgmma)
      for (int w = 0; w < 2; ++w)
        if (op.lo[w] < off + n && off < op.hi[w])
          EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                             "an asynchronous copy into shared bytes [" + std::to_string(off) + ", " +
                                 std::to_string(off + n) + ") that a wgmma.mma_async of thread " + std::to_string(i) +
                                 (&b != t.block ? " of the cluster's block of rank " + std::to_string(b.rank) : "") +
                                 " still reads (its operand " + (w == 0 ? "A" : "B") + ", bytes [" +
                                 std::to_string(op.lo[w]) + ", " + std::to_string(op.hi[w]) +
                                 ")): wait for its group (wgmma.wait_group) before the stage is refilled",
                             loc);
}

void wgmma_fence() { (void)thread_in_kernel("wgmma.fence"); }

void wgmma_commit_group() { ++thread_in_kernel("wgmma.commit_group").wgmma_groups_committed; }

void wgmma_wait_group(int n) {
  Thread& t = thread_in_kernel("wgmma.wait_group");
  complete_groups(t.wgmma, t.wgmma_groups_committed, n, [&](const WgmmaOp& op) { compute(t, op); });
}

void setmaxnreg(int regs, bool inc, std::source_location loc) {
  Thread& t = thread_in_kernel(inc ? "setmaxnreg.inc" : "setmaxnreg.dec");
  // (no named string: a fault leaves this fiber's frame without unwinding it)
  const auto what = [&] { return std::string(inc ? "setmaxnreg.inc " : "setmaxnreg.dec ") + std::to_string(regs); };
  if (regs < 24 || regs > 256 || regs % 8 != 0)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure, what() + ": the count is a multiple of 8 in [24, 256]", loc);
  Block& b = *t.block;
  if (b.nthreads % 128 != 0)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       what() + " in a block of " + std::to_string(b.nthreads) +
                           " threads: it acts on warpgroups, so the block must be a multiple of 128",
                       loc);
  b.maxnreg[t.linear / 128] = static_cast<uint16_t>(regs);
  // A request the register file cannot meet blocks for ever on a GPU.
  int total = 0;
  for (int wg = 0; wg < b.nthreads / 128; ++wg) total += b.maxnreg[wg] * 128;
  if (total > 65536)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       what() + ": the block's warpgroups would hold " + std::to_string(total) +
                           " registers, more than the SM's 65536",
                       loc);
}

}  // namespace ember::sim
