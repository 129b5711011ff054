// Internal interface between softmax's CUDA file (kernels/ops/softmax.cu registers the library's
// variants: the automatic plan and cuDNN) and the benchmark lab (bench/lab/softmax_lab.cu registers
// the forced row plans, Note [library rule] in bench/lab/library_rule.h). Host-only header.
#pragma once

#include "kernels/common/row_plan.h"
#include "kernels/registry.h"

namespace ember {

// softmax, log_softmax or their fused gradients (c.op says which) on CUDA, the rows run by `plan`.
void softmax_cuda_plan(const KernelCall& c, rows::Plan plan);
// Whether `plan` takes the call: the automatic plan any; a forced plan the innermost dim only, and
// block_cached a row (two for a gradient) that fits in shared memory.
bool softmax_plan_supports(const KernelCall& c, rows::Plan plan);

}  // namespace ember
