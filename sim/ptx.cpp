// The PTX instructions of kernels/common/ptx.cuh in the simulator, with the semantics the PTX ISA
// documents (the fragment layouts are spelled out in ptx.cuh):
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: a warp collective; the 32 lanes' fragments
//     are gathered into A (16x16), B (16x8) and C (16x8), D = A B + C is computed (products exact,
//     the sum over k in double, rounded once to f32) and scattered back.
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16: a warp collective; lanes 8i..8i+7
//     give the row addresses of matrix i (16-byte aligned shared memory), each lane receives its
//     fragment of every matrix.
//   cp.async.cg.shared.global: checked when issued (16-byte aligned shared destination, global
//     source unless src-size is 0), performed when a cp.async.wait_group covering its group runs,
//     so a kernel that reads the tile before waiting reads poison.
#include <cstring>

#include "sim/internal.h"
#include "sim/half.h"

namespace ember::sim {

namespace {

float b16_to_float(uint16_t bits, bool bf16) { return bf16 ? bf16_to_float(bits) : f16_to_float(bits); }

}  // namespace

void ldmatrix(uint32_t* r, int count, const void* row, bool trans, std::source_location loc) {
  Thread& t = thread_in_kernel("ldmatrix");
  const auto a = reinterpret_cast<uintptr_t>(row);
  const auto smem = reinterpret_cast<uintptr_t>(t.block->smem);
  // Only lanes 0..8 count - 1 give addresses; the others' operands are ignored.
  if (t.lane < 8 * count) {
    if (a - smem >= t.block->smem_capacity)
      EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress, "ldmatrix row address is not shared memory", loc);
    if ((a & 15) != 0) EMBER_SIM_FAULT_AT(cudaErrorMisalignedAddress, "ldmatrix row address not 16-byte aligned", loc);
    // counted as an ldmatrix, whose wavefronts go by matrix (Note [ldmatrix wavefronts] in counters.cpp)
    check_access(t, a, 16, Access::read, __builtin_return_address(0), false);
    if (t.block->counting) count_access(t, a, 16, CountKind::ldmatrix, __builtin_return_address(0));
  }
  std::memcpy(t.in, &row, sizeof row);
  warp_matrix_op(t, static_cast<uint8_t>(kLdmatrixOp | count | (trans ? 8 : 0)), loc);
  std::memcpy(r, t.out, sizeof(uint32_t) * static_cast<size_t>(count));
}

void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16,
                  std::source_location loc) {
  Thread& t = thread_in_kernel("mma.sync");
  uint32_t in[10];
  std::memcpy(in, a, 16);
  in[4] = b0;
  in[5] = b1;
  std::memcpy(in + 6, d, 16);
  std::memcpy(t.in, in, sizeof in);
  warp_matrix_op(t, static_cast<uint8_t>(kMmaOp | (bf16 ? 1 : 0)), loc);
  std::memcpy(d, t.out, 16);
}

// Runs on the last lane to arrive, with every lane's inputs in threads[w * 32 + l].in.
void ptx_collective(Block& b, int w, const Thread& proto) {
  Thread* lanes[32];
  for (int l = 0; l < 32; ++l) lanes[l] = &b.threads[w * 32 + l];
  if (proto.op & kLdmatrixOp) {
    const int count = proto.op & 7;
    const bool trans = (proto.op & 8) != 0;
    for (int m = 0; m < count; ++m) {
      // the 8 rows of matrix m, 8 b16 elements each
      uint16_t mat[8][8];
      for (int r = 0; r < 8; ++r) {
        const unsigned char* row;
        std::memcpy(&row, lanes[8 * m + r]->in, sizeof row);
        std::memcpy(mat[r], row, 16);
      }
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t4 = l & 3;
        const uint16_t lo = trans ? mat[2 * t4][g] : mat[g][2 * t4];
        const uint16_t hi = trans ? mat[2 * t4 + 1][g] : mat[g][2 * t4 + 1];
        const uint32_t v = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
        std::memcpy(lanes[l]->out + 4 * m, &v, 4);
      }
    }
    return;
  }
  // mma.m16n8k16: gather A, B, C from the fragments
  const bool bf16 = (proto.op & 1) != 0;
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    uint32_t in[10];
    std::memcpy(in, lanes[l]->in, sizeof in);
    const int g = l >> 2, t4 = l & 3;
    for (int h = 0; h < 2; ++h) {  // low and high halves: columns 2t and 2t+1
      auto half = [&](uint32_t reg) { return b16_to_float(static_cast<uint16_t>(h == 0 ? reg : reg >> 16), bf16); };
      A[g][2 * t4 + h] = half(in[0]);
      A[g + 8][2 * t4 + h] = half(in[1]);
      A[g][2 * t4 + 8 + h] = half(in[2]);
      A[g + 8][2 * t4 + 8 + h] = half(in[3]);
      B[2 * t4 + h][g] = half(in[4]);
      B[2 * t4 + 8 + h][g] = half(in[5]);
    }
    float c[4];
    std::memcpy(c, in + 6, 16);
    C[g][2 * t4] = c[0];
    C[g][2 * t4 + 1] = c[1];
    C[g + 8][2 * t4] = c[2];
    C[g + 8][2 * t4 + 1] = c[3];
  }
  float D[16][8];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double s = C[m][n];
      for (int k = 0; k < 16; ++k) s += static_cast<double>(A[m][k]) * static_cast<double>(B[k][n]);
      D[m][n] = static_cast<float>(s);
    }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t4 = l & 3;
    const float out[4] = {D[g][2 * t4], D[g][2 * t4 + 1], D[g + 8][2 * t4], D[g + 8][2 * t4 + 1]};
    std::memcpy(lanes[l]->out, out, 16);
  }
}

void cp_async(void* smem_dst, const void* gmem_src, int copy_bytes, int src_bytes, std::source_location loc) {
  Thread& t = thread_in_kernel("cp.async");
  const auto d = reinterpret_cast<uintptr_t>(smem_dst);
  const auto smem = reinterpret_cast<uintptr_t>(t.block->smem);
  if (d - smem >= t.block->smem_capacity)
    EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress, "cp.async destination is not shared memory", loc);
  if ((d % static_cast<uintptr_t>(copy_bytes)) != 0 || (reinterpret_cast<uintptr_t>(gmem_src) % copy_bytes) != 0)
    EMBER_SIM_FAULT_AT(cudaErrorMisalignedAddress,
                       "cp.async of " + std::to_string(copy_bytes) + " bytes with a misaligned address", loc);
  if (src_bytes > 0) {
    if (reinterpret_cast<uintptr_t>(gmem_src) - smem < t.block->smem_capacity)
      EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress, "cp.async source is shared memory (it must be global)", loc);
    check_access(t, reinterpret_cast<uintptr_t>(gmem_src), static_cast<size_t>(src_bytes), Access::read,
                 __builtin_return_address(0));
  }
  // The efficiency counters take the shared write as issued here, at the instruction's address, with
  // its global read (one cp.async: one global request and one shared request); cp_async_wait does
  // it later and does not count it again.
  if (t.block->counting)
    count_access(t, d, static_cast<size_t>(copy_bytes), CountKind::shared_store, __builtin_return_address(0));
  t.copies.push_back(AsyncCopy{smem_dst, gmem_src, copy_bytes, src_bytes, t.groups_committed + 1});
}

void cp_async_commit() {
  Thread& t = thread_in_kernel("cp.async.commit_group");
  ++t.groups_committed;
}

void cp_async_wait(int n) {
  Thread& t = thread_in_kernel("cp.async.wait_group");
  const void* pc = __builtin_return_address(0);
  complete_groups(t.copies, t.groups_committed, n, [&](const AsyncCopy& c) {
    // the shared write happens now, by this thread (racecheck sees it here)
    check_access(t, reinterpret_cast<uintptr_t>(c.dst), static_cast<size_t>(c.bytes), Access::write, pc, false);
    auto* dst = static_cast<unsigned char*>(c.dst);
    if (c.src_bytes > 0) raw_copy(dst, c.src, static_cast<size_t>(c.src_bytes));
    for (int k = c.src_bytes; k < c.bytes; ++k) dst[k] = 0;
  });
}

}  // namespace ember::sim
