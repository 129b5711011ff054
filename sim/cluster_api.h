// Thread-block clusters in the simulator as kernel code calls them, through the wrappers of
// kernels/common/cluster.cuh (simulator build only). Implementations and the simulator's model of
// them (Note [simulated clusters]): sim/cluster.cpp.
#pragma once

#include <vector_types.h>

#include <cstdint>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sim/device_api.h"

namespace ember::sim {

// Queues the grid with its blocks grouped in clusters of `cluster` blocks, as a launch with
// cudaLaunchAttributeClusterDimension does (the checks of launch(), and the grid a whole number of
// clusters in every dimension, at most 8 blocks per cluster).
void launch_cluster(const void* kernel, dim3 grid, dim3 block, dim3 cluster, size_t dynamic_smem, cudaStream_t stream,
                    KernelBody body);
template <class... Params, class... Args>
cudaError_t launch_kernel_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster, size_t dynamic_smem,
                                  cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch_kernel_cluster: wrong number of kernel arguments");
  launch_cluster(reinterpret_cast<const void*>(kernel), grid, block, cluster, dynamic_smem, stream,
                 kernel_body(kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)));
  return cudaGetLastError();
}

// %cluster_ctarank, %cluster_nctarank, %cluster_ctaid, %cluster_nctaid, %clusterid
unsigned cluster_ctarank();
unsigned cluster_nctarank();
uint3 cluster_ctaid();
dim3 cluster_nctaid();
uint3 cluster_id();
// barrier.cluster.arrive[.relaxed] and barrier.cluster.wait: a wait returns once every thread of the
// cluster that has not exited has arrived in the phase of the caller's arrival.
void cluster_arrive(bool relaxed, std::source_location loc);
void cluster_wait(std::source_location loc);
// mapa: the generic address of the same shared-memory offset as `p` (the caller's shared memory) in
// the block of rank `rank` of the cluster.
void* map_shared_rank(const void* p, unsigned rank, std::source_location loc);
// mbarrier.arrive.release.cluster.shared::cluster on the mbarrier at the offset of `bar` in the
// block of rank `rank`.
void mbarrier_arrive_cluster(uint64_t* bar, unsigned rank, std::source_location loc);
// cp.async.bulk.tensor.<rank>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster:
// the box lands at the offset of `smem_dst` in every block of the cluster named in `cta_mask`, each
// completing its bytes on the mbarrier at the offset of `bar` in that block.
void tma_load_multicast(void* smem_dst, const void* tensor_map, const int32_t* coords, int rank, uint64_t* bar,
                        uint16_t cta_mask, std::source_location loc);

}  // namespace ember::sim
