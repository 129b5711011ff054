// Which row kernel runs a row op (kernels/common/row_kernels.cuh): host-only, so the internal
// interfaces of the row ops' CUDA files (kernels/ops/softmax_cuda.h, kernels/ops/loss_cuda.h) can
// name a plan without the kernels.
#pragma once

namespace ember::rows {

// Which kernel runs a B == 1 geometry. `automatic` picks by C (the table at the top of
// row_kernels.cuh): what the library's variants run. The others force one kernel for any C: the
// benchmark lab's variants (bench/lab/softmax_lab.cu, bench/lab/loss_lab.cu) compare them.
enum class Plan { automatic, warp, block_2pass, block_cached };

}  // namespace ember::rows
