// The simulator's mbarriers and bulk asynchronous copies as kernel code calls them, through the
// wrappers of kernels/common/mbarrier.cuh (simulator build only). Implementations and the
// simulator's model of them: sim/mbarrier.cpp.
#pragma once

#include <cstdint>
#include <source_location>

namespace ember::sim {

void mbarrier_init(uint64_t* bar, uint32_t count, std::source_location loc);
// arrive (count 1), after adding `tx` to the phase's transaction count; returns the state token (the
// phase it arrived in).
uint64_t mbarrier_arrive(uint64_t* bar, uint32_t tx, std::source_location loc);
void mbarrier_expect_tx(uint64_t* bar, uint32_t tx, std::source_location loc);
// True once the phase of this parity has completed; waits (lets the block's other threads run)
// until it has.
bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, std::source_location loc);
void mbarrier_inval(uint64_t* bar, std::source_location loc);
// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar, std::source_location loc);
// cp.async.bulk.tensor.<rank>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes (sim/tma.cpp):
// the box of the tensor map at `coords` (rank of them, dimension 0 first).
void tma_load(void* smem_dst, const void* tensor_map, const int32_t* coords, int rank, uint64_t* bar,
              std::source_location loc);
// cp.async.bulk.tensor.<rank>d.global.shared::cta.bulk_group: the box at `smem_src` to the tensor
// at `coords`; cp.async.bulk.commit_group and cp.async.bulk.wait_group[.read] n; and
// fence.proxy.async.shared::cta (sim/tma.cpp, Note [async proxy]).
void tma_store(const void* tensor_map, const int32_t* coords, int rank, const void* smem_src, std::source_location loc);
void bulk_commit_group();
void bulk_wait_group(int n);
void fence_proxy_async();
// wgmma (sim/wgmma.cpp): wgmma.mma_async.sync.aligned.m64n<n>k16.f32.{bf16,f16} and
// .m64n<n>k8.f32.tf32 with both operands in shared memory (descriptors; trans_a / trans_b: that
// operand MN-major, f16 and bf16 only), wgmma.fence, wgmma.commit_group, wgmma.wait_group n.
enum class WgmmaType : uint8_t { f16, bf16, tf32 };
void wgmma(float* d, int n, uint64_t desc_a, uint64_t desc_b, bool scale_d, WgmmaType type, bool trans_a, bool trans_b,
           std::source_location loc);
void wgmma_fence();
void wgmma_commit_group();
void wgmma_wait_group(int n);
// setmaxnreg.{inc,dec}.sync.aligned.u32 regs: checked (a multiple of 8 in [24, 256], a block of
// whole warpgroups, every warpgroup's request within the SM's 64K registers), otherwise a no-op.
void setmaxnreg(int regs, bool inc, std::source_location loc);

}  // namespace ember::sim
