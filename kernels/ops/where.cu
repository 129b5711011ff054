// where on CUDA: the generic elementwise kernel with a bool and two value operands.
#include "kernels/common/cuda_loops.cuh"
#include "kernels/ops/where.h"
#include "kernels/registry.h"

namespace ember {

namespace {
void where_cuda(const KernelCall& k) {
  const Tensor &c = k.in[0], &a = k.in[1], &b = k.in[2];
  Tensor& out = k.out[0];
  ElementwiseLayout L = make_layout({&out, &c, &a, &b});
  EMBER_DISPATCH_ALL(a.dtype(), "where", [&] {
    gpu_map<scalar_t, bool, scalar_t, scalar_t>(L, {&out, &c, &a, &b}, WhereFn<scalar_t>{});
  });
}
}  // namespace

void register_cuda_where(OpInfo& info) {
  info.add_variant(
      {.name = "cuda", .device = DeviceType::cuda, .fn = where_cuda, .note = "generic elementwise kernel"});
}

}  // namespace ember
