// cross_entropy's per-row paths for every size and its gradient's forced row plans. Lab variants
// (Note [lab variants] in kernels/lab_variants.h): none is a default or a recorded winner (Note
// [library rule] in bench/lab/library_rule.h), so they are here to be compared with the library's
// `fused` variants:
//   cross_entropy           rows   the per-row kernel (regs/warp/block/cols, as `fused` picks) and
//                                  the fixed-order finalize also where `fused` runs its one-block
//                                  path (the MNIST batches)
//                           block  a block per row + finalize, for every C
//   cross_entropy_backward  warp, block_2pass, block_cached: one row kernel for every C
// The kernels stay in the library (kernels/ops/loss.cu, kernels/common/row_kernels.cuh): `fused`
// runs each of them for some shape; this file only forces the choice (kernels/ops/loss_cuda.h).
#include "bench/lab/lab.h"

#include "kernels/lab_variants.h"
#include "kernels/ops/loss_cuda.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <rows::Plan kPlan>
void forward(const KernelCall& c) {
  cross_entropy_cuda_rows(c, kPlan);
}
template <rows::Plan kPlan>
void backward(const KernelCall& c) {
  cross_entropy_backward_cuda_plan(c, kPlan);
}
template <rows::Plan kPlan>
bool forward_supports(const KernelCall& c) {
  return cross_entropy_plan_supports(c, kPlan);
}
template <rows::Plan kPlan>
bool backward_supports(const KernelCall& c) {
  return cross_entropy_backward_plan_supports(c, kPlan);
}

}  // namespace

void register_lab_loss() {
  add_lab_variant(OpId::cross_entropy,
                  {.name = "rows",
                   .device = DeviceType::cuda,
                   .fn = forward<rows::Plan::automatic>,
                   .dtypes = kFloatTypes,
                   .flags = kReference,
                   .note = "per-row kernel (regs/warp/block/cols) + fixed-order finalize for every size"});
  add_lab_variant(OpId::cross_entropy, {.name = "block",
                                        .device = DeviceType::cuda,
                                        .fn = forward<rows::Plan::block_2pass>,
                                        .dtypes = kFloatTypes,
                                        .flags = kReference,
                                        .supports = forward_supports<rows::Plan::block_2pass>,
                                        .note = "a block per row + finalize, for every C"});
  add_lab_variant(OpId::cross_entropy_backward, {.name = "warp",
                                                 .device = DeviceType::cuda,
                                                 .fn = backward<rows::Plan::warp>,
                                                 .dtypes = kFloatTypes,
                                                 .flags = kReference,
                                                 .supports = backward_supports<rows::Plan::warp>,
                                                 .note = "a warp per row"});
  add_lab_variant(OpId::cross_entropy_backward, {.name = "block_2pass",
                                                 .device = DeviceType::cuda,
                                                 .fn = backward<rows::Plan::block_2pass>,
                                                 .dtypes = kFloatTypes,
                                                 .flags = kReference,
                                                 .supports = backward_supports<rows::Plan::block_2pass>,
                                                 .note = "a block per row, the row read twice"});
  add_lab_variant(OpId::cross_entropy_backward, {.name = "block_cached",
                                                 .device = DeviceType::cuda,
                                                 .fn = backward<rows::Plan::block_cached>,
                                                 .dtypes = kFloatTypes,
                                                 .flags = kReference,
                                                 .supports = backward_supports<rows::Plan::block_cached>,
                                                 .note = "a block per row, the row kept in shared memory"});
}

}  // namespace ember
