// Grid sizing for grid-stride kernels: how many blocks fill the device without idling any; and the
// device facts launchers ask for on every call (SM count, compute capability), cached.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ember::cuda {

// Number of SMs of device d (cached; grid_size.cu).
int sm_count(int device);
// Compute capability of device d as 10 major + minor, e.g. 90 (cached).
int compute_capability(int device);

// Blocks for a grid-stride loop over `work_items` with `threads` per block: enough blocks to fill
// the device several times over, never more than there is work for.
inline unsigned grid_for(int64_t work_items, int threads, int device) {
  int64_t need = (work_items + threads - 1) / threads;
  int64_t cap = static_cast<int64_t>(sm_count(device)) * 16;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(need, cap)));
}

}  // namespace ember::cuda
