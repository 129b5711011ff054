// softmax's, log_softmax's and their gradients' forced row plans: one row kernel for every C
// (innermost dims only), where the library's `fused` variant picks the kernel by C. Lab variants
// (Note [lab variants] in kernels/lab_variants.h): none is a default or a recorded winner (Note
// [library rule] in bench/lab/library_rule.h), so they are here to be compared with `fused` and
// cuDNN. The kernels stay in the library (kernels/common/row_kernels.cuh): `fused` runs each of them
// for some C; this file only forces the choice (softmax_cuda_plan, kernels/ops/softmax_cuda.h).
#include "bench/lab/lab.h"

#include "kernels/lab_variants.h"
#include "kernels/ops/softmax_cuda.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <rows::Plan kPlan>
void run(const KernelCall& c) {
  softmax_cuda_plan(c, kPlan);
}
template <rows::Plan kPlan>
bool supports(const KernelCall& c) {
  return softmax_plan_supports(c, kPlan);
}

}  // namespace

void register_lab_softmax() {
  for (OpId id : {OpId::softmax, OpId::log_softmax, OpId::softmax_backward, OpId::log_softmax_backward}) {
    add_lab_variant(id, {.name = "warp",
                         .device = DeviceType::cuda,
                         .fn = run<rows::Plan::warp>,
                         .dtypes = kFloatTypes,
                         .flags = kReference,
                         .supports = supports<rows::Plan::warp>,
                         .note = "a warp per row, the row read twice"});
    add_lab_variant(id, {.name = "block_2pass",
                         .device = DeviceType::cuda,
                         .fn = run<rows::Plan::block_2pass>,
                         .dtypes = kFloatTypes,
                         .flags = kReference,
                         .supports = supports<rows::Plan::block_2pass>,
                         .note = "a block per row, 16-byte loads, the row read twice"});
    add_lab_variant(id, {.name = "block_cached",
                         .device = DeviceType::cuda,
                         .fn = run<rows::Plan::block_cached>,
                         .dtypes = kFloatTypes,
                         .flags = kReference,
                         .supports = supports<rows::Plan::block_cached>,
                         .note = "a block per row, the row kept in shared memory"});
  }
}

}  // namespace ember
