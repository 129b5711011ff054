// Elementwise unary ops on CUDA: the functors of unary.h run by the generic kernel of
// kernels/common/cuda_loops.cuh (16-byte vector loads on contiguous data, strided otherwise).
//
// Versions: one per op ("cuda"); the interesting code is in cuda_loops.cuh.
// Roofline: 2 bytes moved per element-byte (read x, write y), e.g. relu f32 2^26: 512 MiB.
#include "kernels/common/cuda_loops.cuh"
#include "kernels/ops/unary.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <class Op>
void cuda_unary(const KernelCall& c) {
  const Tensor& x = c.in[0];
  Tensor& y = c.out[0];
  ElementwiseLayout L = make_layout({&y, &x});
  if constexpr (Op::kFloatOnly) {
    EMBER_DISPATCH_FLOAT(x.dtype(), Op::kName, [&] {
      gpu_map<scalar_t, scalar_t>(L, {&y, &x}, unary::Fwd<Op, scalar_t>{});
    });
  } else {
    EMBER_DISPATCH_NUMERIC(x.dtype(), Op::kName, [&] {
      gpu_map<scalar_t, scalar_t>(L, {&y, &x}, unary::Fwd<Op, scalar_t>{});
    });
  }
}

template <class Op>
void cuda_unary_backward(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[1];
  Tensor& dx = c.out[0];
  ElementwiseLayout L = make_layout({&dx, &g, &x});
  EMBER_DISPATCH_FLOAT(x.dtype(), Op::kName, [&] {
    gpu_map<scalar_t, scalar_t, scalar_t>(L, {&dx, &g, &x}, unary::Bwd<Op, scalar_t>{});
  });
}

}  // namespace

// The macro parameter is `op`, not `name`: `name` would also replace the `.name` designator.
#define EMBER_UNARY(op, Functor)                                                          \
  void register_cuda_##op(OpInfo& info) {                                                 \
    info.add_variant({.name = "cuda",                                                     \
                      .device = DeviceType::cuda,                                         \
                      .fn = cuda_unary<unary::Functor>,                                   \
                      .dtypes = unary::Functor::kFloatOnly ? kFloatTypes : kNumericTypes, \
                      .note = "generic vectorized elementwise kernel"});                  \
  }                                                                                       \
  void register_cuda_##op##_backward(OpInfo& info) {                                      \
    info.add_variant({.name = "cuda",                                                     \
                      .device = DeviceType::cuda,                                         \
                      .fn = cuda_unary_backward<unary::Functor>,                          \
                      .dtypes = kFloatTypes,                                              \
                      .note = "generic vectorized elementwise kernel"});                  \
  }
#include "kernels/ops.def"

}  // namespace ember
