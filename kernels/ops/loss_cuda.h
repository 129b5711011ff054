// Internal interface between the losses' CUDA file (kernels/ops/loss.cu registers the library's
// variants) and the benchmark lab (bench/lab/loss_lab.cu registers cross_entropy's per-row paths and
// its gradient's forced row plans, Note [library rule] in bench/lab/library_rule.h). Host-only
// header.
#pragma once

#include "kernels/common/row_plan.h"
#include "kernels/registry.h"

namespace ember {

// cross_entropy on CUDA with the per-row kernels run by `plan` and the fixed-order finalize for every
// size: the library's `fused` variant is the automatic plan with one block doing the whole mean or
// sum of small batches instead.
void cross_entropy_cuda_rows(const KernelCall& c, rows::Plan plan);
// cross_entropy_backward on CUDA, the rows run by `plan`.
void cross_entropy_backward_cuda_plan(const KernelCall& c, rows::Plan plan);
// Whether `plan` takes the call: the automatic plan any; a forced one the classes innermost
// ([N, C] or [C]), and block_cached a row that fits in shared memory.
bool cross_entropy_plan_supports(const KernelCall& c, rows::Plan plan);
bool cross_entropy_backward_plan_supports(const KernelCall& c, rows::Plan plan);

}  // namespace ember
